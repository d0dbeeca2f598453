// Where the disk importers may not fetch from: the cluster's own endpoints (every node's
// addresses, where kubelets and host services listen; the apiserver as the managers reach it),
// what the chart adds (imports.deniedNetworks: the pod and service ranges, say), less what it
// allows (imports.allowedNetworks). Loopback and link-local (cloud metadata) are always denied by
// the importer itself (src/importer/destinations.ts).
import type { V1Node } from '@kubernetes/client-node';
import { isIP } from 'node:net';
import { hostAndPort } from '../importer/destinations.js';
import type { ObjectCache } from '../kube/object-cache.js';
import type { ImportDestinations } from '../reconcilers/virtual-machine/disks/importer-pod.js';

/** The apiserver's address and port from its URL, when the host is an address (`[v6]:port` for IPv6). */
export function apiserverEndpoint(server: string | undefined): string | undefined {
  if (!server) return undefined;
  const { host, port } = hostAndPort(new URL(server));
  const family = isIP(host);
  if (!family) return undefined;
  return family === 6 ? `[${host}]:${port}` : `${host}:${port}`;
}

export function importDestinations(
  cache: ObjectCache,
  apiserver: string | undefined,
  configured: ImportDestinations,
): () => ImportDestinations {
  return () => {
    const nodeAddresses = cache
      .list<V1Node>('Node', undefined)
      .flatMap((node) => node.status?.addresses ?? [])
      .filter((address) => ['InternalIP', 'ExternalIP'].includes(address.type) && isIP(address.address))
      .map((address) => address.address);
    const deny = [...new Set([...configured.deny, ...(apiserver ? [apiserver] : []), ...nodeAddresses])];
    return { deny, allow: configured.allow };
  };
}
