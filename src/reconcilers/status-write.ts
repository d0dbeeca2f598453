// The status write of vmop's own kinds (snapshots, restores, clones, schedules): only when the
// status changed, as a merge patch over the version read, so a reconcile from a cache behind an
// earlier write fails (and goes again) instead of writing over it.
import { isDeepStrictEqual } from 'node:util';
import { GROUP, VERSION } from '../api/virtual-machine.js';
import type { KubeClients } from '../kube/clients.js';
import { mergePatch, statusPatch } from '../kube/merge-patch.js';
import { eventObjectOf, type EventRecorder } from './events.js';

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

/**
 * Writes `status` as writeStatusIfChanged does and, when that moved the phase to one `reasons`
 * names, records an Event of that reason with the status's message (a Warning for Failed).
 * Whether it wrote.
 */
export async function writeStatusWithPhaseEvent<S extends { phase?: string; message?: string }>(
  clients: KubeClients,
  record: EventRecorder,
  plural: string,
  object: StatusHolder<S> & Parameters<typeof eventObjectOf>[0],
  status: S,
  reasons: Partial<Record<NonNullable<S['phase']>, string>>,
): Promise<boolean> {
  const before = object.status?.phase;
  if (!(await writeStatusIfChanged(clients, plural, object, status))) return false;
  const reason = status.phase === undefined ? undefined : reasons[status.phase as NonNullable<S['phase']>];
  if (reason && status.phase !== before)
    await record(eventObjectOf(object), {
      type: status.phase === 'Failed' ? 'Warning' : 'Normal',
      reason,
      message: status.message ?? '',
    });
  return true;
}
