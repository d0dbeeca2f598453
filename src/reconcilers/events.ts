// Kubernetes Events on vmop's objects, counted in one series per (object, type, reason, message).
import { PatchStrategy, setHeaderOptions, type V1ObjectReference } from '@kubernetes/client-node';
import { createHash } from 'node:crypto';
import { isConflict, type KubeClients } from '../kube/clients.js';
import type { Logger } from '../util/logger.js';
import { FIELD_MANAGER } from './virtual-machine/naming.js';

export interface ObjectEvent {
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
  /** How many occurrences this stands for (default 1); repeats are counted in one Event. */
  count?: number;
}

export type EventRecorder = (
  object: Required<Pick<V1ObjectReference, 'apiVersion' | 'kind' | 'name' | 'namespace' | 'uid'>>,
  event: ObjectEvent,
) => Promise<void>;

const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

/**
 * Records Events as kubectl describe shows them: repeats of the same one are counted in one
 * series, whose name is derived from what makes it the same. Best effort, as Kubernetes treats
 * Events: a lost Event is logged, never thrown (the status is the record).
 */
export function eventRecorder(clients: KubeClients, logger: Logger, now: () => Date): EventRecorder {
  async function write(...[object, event]: Parameters<EventRecorder>): Promise<void> {
    const time = now();
    const { namespace } = object;
    const series = createHash('sha256')
      .update([object.uid, event.type, event.reason, event.message].join('\0'))
      .digest('hex')
      .slice(0, 16);
    const name = `${object.name}.${series}`;
    const count = event.count ?? 1;
    try {
      await clients.core.createNamespacedEvent({
        namespace,
        body: {
          metadata: { name, namespace },
          involvedObject: object,
          type: event.type,
          reason: event.reason,
          message: event.message,
          source: { component: FIELD_MANAGER },
          firstTimestamp: time,
          lastTimestamp: time,
          count,
        },
      });
      return;
    } catch (err) {
      if (!isConflict(err)) throw err;
    }
    // A repeat (rarer than a first Event, so it pays the read): counted in the existing series.
    const existing = await clients.core.readNamespacedEvent({ name, namespace });
    await clients.core.patchNamespacedEvent(
      { name, namespace, body: { count: (existing.count ?? 1) + count, lastTimestamp: time } },
      mergePatch,
    );
  }
  return (object, event) =>
    write(object, event).catch((err: unknown) =>
      logger.warn(
        { object: `${object.namespace}/${object.name}`, reason: event.reason, err: String(err) },
        'could not record an Event',
      ),
    );
}
