// Kubernetes Events on vmop's objects, counted in one series per (object, type, reason, message).
import { type CoreV1Event, type V1ObjectReference } from '@kubernetes/client-node';
import { createHash } from 'node:crypto';
import { isConflict, type KubeClients } from '../kube/clients.js';
import type { Logger } from '../util/logger.js';
import { FIELD_MANAGER } from './virtual-machine/naming.js';
import { mergePatch } from '../kube/merge-patch.js';

export interface ObjectEvent {
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
  /** How many occurrences this stands for (default 1); repeats are counted in one Event. */
  count?: number;
  /** How long what it tells took (an import, say): for the managers' metrics, not written to the Event. */
  durationSeconds?: number;
}

export type EventObject = Required<
  Pick<V1ObjectReference, 'apiVersion' | 'kind' | 'name' | 'namespace' | 'uid'>
>;

/** The Event's reference to one of vmop's custom objects (a VM, say). */
export function eventObjectOf(object: {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; uid?: string };
}): EventObject {
  const { name, namespace, uid } = object.metadata;
  return { apiVersion: object.apiVersion, kind: object.kind, name, namespace: namespace!, uid: uid! };
}

export type EventRecorder = (object: EventObject, event: ObjectEvent) => Promise<void>;

/** Concurrent repeats of one Event (two replicas, say) each retry their guarded count update. */
const COUNT_ATTEMPTS = 10;

/**
 * The Event's name: the object's name and a digest of what makes two Events the same, so that a
 * repeat finds its series by name (kubectl's `<object>.<suffix>` shape; an object name of at most
 * 253 − 17 characters keeps it a valid name).
 */
export function eventSeriesName(object: EventObject, event: ObjectEvent): string {
  const digest = createHash('sha256')
    .update([object.uid, event.type, event.reason, event.message].join('\0'))
    .digest('hex')
    .slice(0, 16);
  return `${object.name}.${digest}`;
}

/** The first Event of a series. */
export function newEvent(object: EventObject, event: ObjectEvent, time: Date): CoreV1Event {
  return {
    metadata: { name: eventSeriesName(object, event), namespace: object.namespace },
    involvedObject: object,
    type: event.type,
    reason: event.reason,
    message: event.message,
    source: { component: FIELD_MANAGER },
    firstTimestamp: time,
    lastTimestamp: time,
    count: event.count ?? 1,
  };
}

/** The patch that counts `event` once more in the series `existing`, guarded by its resourceVersion. */
export function repeatPatch(existing: CoreV1Event, event: ObjectEvent, time: Date) {
  return {
    metadata: { resourceVersion: existing.metadata.resourceVersion },
    count: (existing.count ?? 1) + (event.count ?? 1),
    lastTimestamp: time,
  };
}

/**
 * Records Events as kubectl describe shows them: repeats of the same one are counted in one
 * series. Best effort, as Kubernetes treats Events: a lost Event is logged, never thrown (the
 * status is the record).
 */
export function eventRecorder(clients: KubeClients, logger: Logger, now: () => Date): EventRecorder {
  async function write(object: EventObject, event: ObjectEvent): Promise<void> {
    const time = now();
    const { namespace } = object;
    const body = newEvent(object, event, time);
    try {
      await clients.core.createNamespacedEvent({ namespace, body });
      return;
    } catch (err) {
      if (!isConflict(err)) throw err;
    }
    // A repeat (rarer than a first Event, so it pays the read): counted in the existing series.
    const name = body.metadata.name!;
    for (let attempt = 1; ; attempt++) {
      const existing = await clients.core.readNamespacedEvent({ name, namespace });
      try {
        await clients.core.patchNamespacedEvent(
          { name, namespace, body: repeatPatch(existing, event, time) },
          mergePatch,
        );
        return;
      } catch (err) {
        if (!isConflict(err) || attempt >= COUNT_ATTEMPTS) throw err;
      }
    }
  }
  return (object, event) =>
    write(object, event).catch((err: unknown) =>
      logger.warn(
        { object: `${object.namespace}/${object.name}`, reason: event.reason, err: String(err) },
        'could not record an Event',
      ),
    );
}
