// What the managers export about the VMs (besides the queue's own series), named so a KubeVirt
// user finds their way (kubevirt_vmi_phase_count → vmop_vm_phase_count). Two kinds:
// - the cluster's state, counted from the watch caches at scrape time: every replica exports the
//   same, so rules take max() over replicas;
// - what happened (migrations), counted by the replica whose status write told it
//   (each transition is told once): rules sum() over replicas.
import type { KubernetesObject, V1Node } from '@kubernetes/client-node';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { KIND, type VirtualMachine, type VirtualMachineStatus } from '../api/virtual-machine.js';
import { OPERATION_KIND } from '../api/virtual-machine-operation.js';
import type { ObjectCache } from '../kube/object-cache.js';
import type { ObjectEvent } from '../reconcilers/events.js';

type CachedVm = KubernetesObject & {
  metadata: { name: string; namespace: string };
  spec: Pick<VirtualMachine['spec'], 'runPolicy'> & { vm: Pick<VirtualMachine['spec']['vm'], 'state'> };
  status?: VirtualMachineStatus;
};
type CachedOperation = KubernetesObject & { spec?: { type?: string }; status?: { phase?: string } };

/** Per-VM series exist only for VMs in trouble, so their number stays that of the VMs in trouble. */
export function registerVmStateMetrics(
  registry: Registry,
  cache: ObjectCache,
  now: () => Date = () => new Date(),
) {
  // The cached objects as they are (the CRD's schema checked them): parsing thousands of VMs on
  // every scrape cost most of it (bench/metrics).
  const vms = () => cache.list<CachedVm>(KIND, undefined);
  const condition = (vm: CachedVm, type: string) => vm.status?.conditions?.find((c) => c.type === type);

  new Gauge({
    name: 'vmop_vm_phase_count',
    help: 'VMs by phase, node and run policy',
    labelNames: ['phase', 'node', 'run_policy'],
    registers: [registry],
    collect() {
      this.reset();
      for (const vm of vms())
        this.inc({
          phase: vm.status?.phase ?? 'Pending',
          node: vm.status?.node ?? '',
          run_policy: vm.spec.runPolicy ?? '',
        });
    },
  });
  new Gauge({
    name: 'vmop_vm_awaiting_restart_count',
    help: 'VMs with spec changes that wait for a restart (restartAwaitingChanges)',
    registers: [registry],
    collect() {
      this.set(vms().filter((vm) => (vm.status?.restartAwaitingChanges?.length ?? 0) > 0).length);
    },
  });
  new Gauge({
    name: 'vmop_vm_outdated_runner_count',
    help: 'Running VMs whose runner runs another image than the default runner image',
    registers: [registry],
    collect() {
      this.set(vms().filter((vm) => vm.status?.runnerPod?.outdated === true).length);
    },
  });
  new Gauge({
    name: 'vmop_vm_start_backoff_count',
    help: 'VMs whose runner failed to start and that wait to start again (status.startFailure)',
    registers: [registry],
    collect() {
      this.set(vms().filter((vm) => vm.status?.startFailure !== undefined).length);
    },
  });
  new Gauge({
    name: 'vmop_vm_operation_count',
    help: 'VirtualMachineOperations (kept as records) by type and phase',
    labelNames: ['type', 'phase'],
    registers: [registry],
    collect() {
      this.reset();
      for (const operation of cache.list<CachedOperation>(OPERATION_KIND, undefined))
        this.inc({ type: operation.spec?.type ?? '', phase: operation.status?.phase ?? 'Pending' });
    },
  });
  new Gauge({
    name: 'vmop_vm_not_running_seconds',
    help: 'How long a VM that should run has not been running (only such VMs have a series)',
    labelNames: ['namespace', 'name', 'phase'],
    registers: [registry],
    collect() {
      this.reset();
      const at = now().getTime();
      for (const vm of vms()) {
        const phase = vm.status?.phase ?? 'Pending';
        if (vm.spec.vm.state !== 'Running' || phase === 'Running' || phase === 'Migrating') continue;
        const since = condition(vm, 'Running')?.lastTransitionTime;
        if (!since) continue;
        this.set(
          { namespace: vm.metadata.namespace, name: vm.metadata.name, phase },
          (at - Date.parse(since)) / 1000,
        );
      }
    },
  });
  // Imports under way, per disk: a stuck one stops moving (the VirtualMachineDiskImportStuck alert).
  const importing = () =>
    vms().flatMap((vm) =>
      (vm.status?.disks ?? [])
        .filter((disk) => disk.phase === 'Importing')
        .map((disk) => ({
          labels: { namespace: vm.metadata.namespace, name: vm.metadata.name, disk: disk.name },
          disk,
        })),
    );
  new Gauge({
    name: 'vmop_vm_disk_import_bytes',
    help: 'Bytes of the source an import under way has downloaded so far, per disk',
    labelNames: ['namespace', 'name', 'disk'],
    registers: [registry],
    collect() {
      this.reset();
      for (const { labels, disk } of importing()) this.set(labels, disk.importedBytes ?? 0);
    },
  });
  new Gauge({
    name: 'vmop_vm_disk_import_progress_ratio',
    help: 'How far an import under way is (of the download; of the conversion after it for qcow2), 0 to 1',
    labelNames: ['namespace', 'name', 'disk'],
    registers: [registry],
    collect() {
      this.reset();
      for (const { labels, disk } of importing())
        this.set(labels, Number.parseFloat(disk.progress ?? '0') / 100 || 0);
    },
  });
  new Gauge({
    name: 'vmop_vm_runner_not_reporting',
    help: 'VMs whose runner runs but does not report (RunnerReporting False), by node',
    labelNames: ['namespace', 'name', 'node'],
    registers: [registry],
    collect() {
      this.reset();
      for (const vm of vms())
        if (condition(vm, 'RunnerReporting')?.status === 'False')
          this.set(
            { namespace: vm.metadata.namespace, name: vm.metadata.name, node: vm.status?.node ?? '' },
            1,
          );
    },
  });
  new Gauge({
    name: 'vmop_vm_on_unschedulable_node',
    help: 'Running VMs on a cordoned node (a drain waits for them), by node',
    labelNames: ['namespace', 'name', 'node'],
    registers: [registry],
    collect() {
      this.reset();
      const cordoned = new Set(
        cache
          .list<V1Node>('Node', undefined)
          .filter((node) => node.spec?.unschedulable)
          .map((node) => node.metadata!.name!),
      );
      for (const vm of vms())
        if (vm.status?.node && cordoned.has(vm.status.node) && vm.status.phase !== 'Stopped')
          this.set({ namespace: vm.metadata.namespace, name: vm.metadata.name, node: vm.status.node }, 1);
    },
  });
}

const MIGRATION_SECONDS = [0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600];
const IMPORT_SECONDS = [1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600];
const DOWNTIME_SECONDS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/** Counts what the VM status transitions tell (their Events), as the replica that wrote them saw them. */
export function vmTransitionMetrics(registry: Registry) {
  const migrations = new Counter({
    name: 'vmop_vm_migrations_total',
    help: 'Live migrations by result (started, succeeded, failed)',
    labelNames: ['result'],
    registers: [registry],
  });
  const duration = new Histogram({
    name: 'vmop_vm_migration_duration_seconds',
    help: 'How long successful live migrations took, from the request to the target taking over',
    buckets: MIGRATION_SECONDS,
    registers: [registry],
  });
  const downtime = new Histogram({
    name: 'vmop_vm_migration_downtime_seconds',
    help: "How long the guest was paused in successful live migrations (QEMU's downtime)",
    buckets: DOWNTIME_SECONDS,
    registers: [registry],
  });
  const importDuration = new Histogram({
    name: 'vmop_vm_disk_import_duration_seconds',
    help: "How long successful disk imports took (the importer pod's run)",
    buckets: IMPORT_SECONDS,
    registers: [registry],
  });
  const imports = new Counter({
    name: 'vmop_vm_disk_imports_total',
    help: 'Disk imports by result (started, succeeded, failed)',
    labelNames: ['result'],
    registers: [registry],
  });
  return (event: ObjectEvent, status: VirtualMachineStatus | undefined) => {
    switch (event.reason) {
      case 'ImportStarted':
        imports.inc({ result: 'started' });
        break;
      case 'Imported':
        imports.inc({ result: 'succeeded' });
        if (event.durationSeconds !== undefined) importDuration.observe(event.durationSeconds);
        break;
      case 'ImportFailed':
        imports.inc({ result: 'failed' });
        break;
      case 'Migrating':
        migrations.inc({ result: 'started' });
        break;
      case 'Migrated': {
        migrations.inc({ result: 'succeeded' });
        const state = status?.migrationState;
        if (state?.downtimeMs !== undefined) downtime.observe(state.downtimeMs / 1000);
        if (state?.endTimestamp)
          duration.observe((Date.parse(state.endTimestamp) - Date.parse(state.startTimestamp)) / 1000);
        break;
      }
      case 'MigrationFailed':
        migrations.inc({ result: 'failed' });
        break;
    }
  };
}
