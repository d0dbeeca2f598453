// The reconcile of one VirtualMachineIPAddressLease key: Bound while the VirtualMachineIPAddress it
// names exists; Released when that went, and then kept for the claim's namespace for the hold
// (the chart's ipAddressHold, 10 minutes as Deckhouse's), so the address can be asked for again
// there (a Static claim takes the lease over); deleted after it, which frees the address.
import type { KubernetesObject } from '@kubernetes/client-node';
import {
  IP_ADDRESS_KIND,
  LEASE_API_REF,
  LEASE_KIND,
  VirtualMachineIPAddressLease,
  ipAddressApiRef,
} from '../../api/virtual-machine-ip-address.js';
import { isConflict, isNotFound, readOptional, type KubeClients } from '../../kube/clients.js';
import { mergePatch } from '../../kube/merge-patch.js';
import type { ObjectCache } from '../../kube/object-cache.js';
import { kubeTime } from '../../kube/time.js';
import type { HandlerResult } from '../../queue/index.js';
import type { Logger } from '../../util/logger.js';

export interface LeaseReconcilerOptions {
  clients: KubeClients;
  cache: ObjectCache;
  /** How long a released address stays with its namespace. */
  holdMs: number;
  logger: Logger;
  now?: () => Date;
}

export function createLeaseReconciler(options: LeaseReconcilerOptions) {
  const { clients, cache, holdMs, logger } = options;
  const now = options.now ?? (() => new Date());

  /**
   * Whether the claim the lease names exists: the cache says so, or (the cache may not have a claim
   * made moments ago) the apiserver does. A lease is never released on the cache's word alone.
   */
  async function claimExists(ref: VirtualMachineIPAddressLease['spec']['virtualMachineIPAddressRef']) {
    const sameClaim = (claim: KubernetesObject | undefined) =>
      claim !== undefined && (!ref.uid || claim.metadata?.uid === ref.uid);
    if (sameClaim(cache.get(IP_ADDRESS_KIND, ref.namespace, ref.name))) return true;
    const read = await readOptional(() =>
      clients.customObjects.getNamespacedCustomObject({ ...ipAddressApiRef(ref.namespace), name: ref.name }),
    );
    return sameClaim(read as KubernetesObject | undefined);
  }

  const writeStatus = (lease: VirtualMachineIPAddressLease, status: Record<string, unknown>) =>
    clients.customObjects.patchClusterCustomObjectStatus(
      {
        ...LEASE_API_REF,
        name: lease.metadata.name,
        body: { metadata: { resourceVersion: lease.metadata.resourceVersion }, status },
      },
      mergePatch,
    );

  return async (key: string): Promise<HandlerResult> => {
    const name = key.slice('vmipl:'.length);
    const cached = cache.get<KubernetesObject>(LEASE_KIND, '', name);
    if (!cached) return;
    const lease = VirtualMachineIPAddressLease.parse(cached);
    const ref = lease.spec.virtualMachineIPAddressRef;
    if (await claimExists(ref)) {
      if (lease.status?.phase !== 'Bound') await writeStatus(lease, { phase: 'Bound', releasedAt: null });
      return;
    }
    if (lease.status?.phase !== 'Released') {
      await writeStatus(lease, { phase: 'Released', releasedAt: kubeTime(now()) });
      logger.info({ lease: name, namespace: ref.namespace }, 'released an address, held for its namespace');
      return { requeueAfter: holdMs };
    }
    const left = Date.parse(lease.status.releasedAt ?? '') + holdMs - now().getTime();
    if (left > 0) return { requeueAfter: left };
    try {
      // Only this version: a claim that took the lease over meanwhile keeps it.
      await clients.customObjects.deleteClusterCustomObject({
        ...LEASE_API_REF,
        name,
        body: { preconditions: { resourceVersion: lease.metadata.resourceVersion } },
      });
      logger.info({ lease: name }, 'the hold ended: the address is free');
    } catch (err) {
      if (isNotFound(err)) return;
      if (isConflict(err)) throw new Error(`lease ${name} changed meanwhile: looking again`);
      throw err;
    }
  };
}
