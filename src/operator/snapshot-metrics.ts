// What the managers export about snapshots, counted from the watch caches at scrape time (every
// replica exports the same; rules take max() over replicas): snapshots by phase, and per schedule
// its failures in a row (the VirtualMachineSnapshotScheduleFailing alert).
import type { KubernetesObject } from '@kubernetes/client-node';
import { Gauge, type Registry } from 'prom-client';
import { SNAPSHOT_KIND } from '../api/virtual-machine-snapshot.js';
import { SCHEDULE_KIND } from '../api/virtual-machine-snapshot-schedule.js';
import type { ObjectCache } from '../kube/object-cache.js';

type WithPhase = KubernetesObject & { status?: { phase?: string } };
type CachedSchedule = KubernetesObject & {
  metadata: { name: string; namespace: string };
  status?: { consecutiveFailures?: number };
};

export function registerSnapshotMetrics(registry: Registry, cache: ObjectCache) {
  new Gauge({
    name: 'vmop_vm_snapshot_count',
    help: 'VirtualMachineSnapshots by phase',
    labelNames: ['phase'],
    registers: [registry],
    collect() {
      this.reset();
      for (const snapshot of cache.list<WithPhase>(SNAPSHOT_KIND, undefined))
        this.inc({ phase: snapshot.status?.phase ?? 'Pending' });
    },
  });
  new Gauge({
    name: 'vmop_snapshot_schedule_consecutive_failures',
    help: 'The most snapshots of one VM a VirtualMachineSnapshotSchedule took that failed in a row',
    labelNames: ['namespace', 'name'],
    registers: [registry],
    collect() {
      this.reset();
      for (const schedule of cache.list<CachedSchedule>(SCHEDULE_KIND, undefined))
        this.set(
          { namespace: schedule.metadata.namespace, name: schedule.metadata.name },
          schedule.status?.consecutiveFailures ?? 0,
        );
    },
  });
}
