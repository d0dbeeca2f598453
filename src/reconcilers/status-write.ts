// The status write of vmop's own kinds (snapshots, restores, clones, schedules): only when the
// status changed, as a merge patch over the version read, so a reconcile from a cache behind an
// earlier write fails (and goes again) instead of writing over it.
import { isDeepStrictEqual } from 'node:util';
import { GROUP, VERSION } from '../api/virtual-machine.js';
import type { KubeClients } from '../kube/clients.js';
import { mergePatch, statusPatch } from '../kube/merge-patch.js';

interface StatusHolder<S extends object> {
  metadata: { name: string; namespace?: string; resourceVersion?: string };
  status?: S;
}

/** Writes `status` over `object`'s unless it is the same; whether it wrote. */
export async function writeStatusIfChanged<S extends object>(
  clients: KubeClients,
  plural: string,
  object: StatusHolder<S>,
  status: S,
): Promise<boolean> {
  if (isDeepStrictEqual(JSON.parse(JSON.stringify(status)), object.status ?? {})) return false;
  await clients.customObjects.patchNamespacedCustomObjectStatus(
    {
      group: GROUP,
      version: VERSION,
      plural,
      namespace: object.metadata.namespace!,
      name: object.metadata.name,
      body: {
        metadata: { resourceVersion: object.metadata.resourceVersion },
        status: statusPatch(object.status, status),
      },
    },
    mergePatch,
  );
  return true;
}
