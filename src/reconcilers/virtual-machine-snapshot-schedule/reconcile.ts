// The reconcile of one VirtualMachineSnapshotSchedule: reads the caches, plans (plan.ts), creates
// and deletes its snapshots, writes the status, tells what happened in Events and comes back at
// the next run.
import type { KubernetesObject } from '@kubernetes/client-node';
import { GROUP, KIND, VERSION, VirtualMachine } from '../../api/virtual-machine.js';
import {
  SNAPSHOT_KIND,
  SNAPSHOT_PLURAL,
  VirtualMachineSnapshot,
} from '../../api/virtual-machine-snapshot.js';
import {
  SCHEDULE_KIND,
  SCHEDULE_PLURAL,
  VirtualMachineSnapshotSchedule,
  parseScheduleKey,
} from '../../api/virtual-machine-snapshot-schedule.js';
import { isNotFound, type KubeClients, createUnlessExists } from '../../kube/clients.js';
import type { ObjectCache } from '../../kube/object-cache.js';
import type { HandlerResult } from '../../queue/index.js';
import type { Logger } from '../../util/logger.js';
import { eventObjectOf, eventRecorder } from '../events.js';
import { writeStatusIfChanged } from '../status-write.js';
import { LABEL_SCHEDULE } from '../virtual-machine/naming.js';
import { planSchedule } from './plan.js';

export interface ScheduleReconcilerOptions {
  clients: KubeClients;
  cache: ObjectCache;
  logger: Logger;
  now?: () => Date;
}

/** Parsed objects of a kind, those that do not parse left out (the CRD admitted them: logged once there). */
const parsedAll = <T>(schema: { safeParse(value: unknown): { data?: T } }, objects: unknown[]): T[] =>
  objects.flatMap((object) => {
    const { data } = schema.safeParse(object);
    return data ? [data] : [];
  });

export function createScheduleReconciler(options: ScheduleReconcilerOptions) {
  const { clients, cache, logger } = options;
  const now = options.now ?? (() => new Date());
  const record = eventRecorder(clients, logger, now);
  const snapshotApi = (namespace: string) => ({
    group: GROUP,
    version: VERSION,
    plural: SNAPSHOT_PLURAL,
    namespace,
  });

  return async function reconcileSchedule(key: string): Promise<HandlerResult> {
    const { namespace, name } = parseScheduleKey(key);
    const raw = cache.get<KubernetesObject>(SCHEDULE_KIND, namespace, name);
    if (!raw || raw.metadata?.deletionTimestamp) return; // its snapshots stay
    const parsed = VirtualMachineSnapshotSchedule.safeParse(raw);
    if (!parsed.success) {
      logger.warn(
        { key, issues: parsed.error.issues },
        'a snapshot schedule the CRD admitted does not parse',
      );
      return;
    }
    const schedule = parsed.data;
    const plan = planSchedule({
      schedule,
      vms: parsedAll(VirtualMachine, cache.list(KIND, namespace)),
      snapshots: parsedAll(
        VirtualMachineSnapshot,
        cache.list(SNAPSHOT_KIND, namespace, { [LABEL_SCHEDULE]: name }),
      ),
      now: now(),
    });
    const writes: string[] = [];
    for (const body of plan.create)
      if (
        await createUnlessExists(() =>
          clients.customObjects.createNamespacedCustomObject({ ...snapshotApi(namespace), body }),
        )
      )
        writes.push(`VirtualMachineSnapshot ${body.metadata.name}`);
    for (const snapshot of plan.delete) {
      try {
        await clients.customObjects.deleteNamespacedCustomObject({
          ...snapshotApi(namespace),
          name: snapshot,
        });
        writes.push(`VirtualMachineSnapshot ${snapshot} (deleted)`);
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    }
    if (await writeStatusIfChanged(clients, SCHEDULE_PLURAL, schedule, plan.status)) {
      writes.push('status');
      for (const event of plan.events) await record(eventObjectOf(schedule), event);
    }
    if (writes.length > 0) logger.info({ key, writes, next: plan.status.nextScheduleTime }, 'reconciled');
    return plan.requeueAfter === undefined ? undefined : { requeueAfter: plan.requeueAfter };
  };
}
