// Issue 42's acceptance: a real Prometheus scrapes vmop as a plain one would (the runner pods'
// prometheus.io annotations, the managers' /metrics) and its queries show a guest at work: CPU
// time rising while it computes, disk bytes by what it wrote (within 10 %), and a live migration
// and its operation in the managers' series, the VM's series then from the other node.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useDevBed } from '../support/beds.js';
import { eventually } from '../support/eventually.js';
import { SHARED_DATA_DISK, testGuestManifest, type ClusterVms } from '../support/cluster-vms.js';
import { startPrometheus, type Prometheus } from '../support/prometheus.js';

const NAMESPACE = 'monitoring';
const VM = 'watched';
const READY = 'VMOP-GUEST-READY';
const MiB = 1024 * 1024;
const WRITTEN_MIB = 8;

describe('Prometheus scrapes vmop: a VM at work, a migration, an operation', () => {
  let vms: ClusterVms;
  let prometheus: Prometheus;
  const of = `namespace="${NAMESPACE}",name="${VM}"`;
  const bed = useDevBed('dev-2', { namespaces: [NAMESPACE] });

  beforeAll(async () => {
    vms = bed.vms(NAMESPACE);
    const state = bed.state();
    prometheus = await startPrometheus({
      netns: state.nodeServices[0]!.netns,
      kubeconfig: state.kubeconfig,
      managers: state.managers.map((manager) => manager.metricsUrl),
    });
  });
  afterAll(async () => {
    await prometheus?.stop();
  });

  /** Waits until Prometheus has a value of `expr` that passes `check`, and returns it. */
  const queried = (expr: string, check: (value: number | undefined) => void, timeoutMs = 60_000) =>
    eventually(async () => {
      const value = await prometheus.value(expr);
      check(value);
      return value!;
    }, timeoutMs);

  it("shows the guest's CPU time rising while it works, and its disk bytes by what it wrote", async () => {
    await vms.apply(
      testGuestManifest(VM, NAMESPACE).replace('    networks: []\n', `    networks: []\n${SHARED_DATA_DISK}`),
    );
    await vms.waitForConsole(VM, READY);
    const cpu = `sum(vmop_vm_vcpu_seconds_total{${of}})`;
    const written = `sum(vmop_vm_storage_write_traffic_bytes_total{${of}})`;
    const cpuBefore = await queried(cpu, (value) => expect(value).toBeGreaterThan(0));
    const writtenBefore = await queried(written, (value) => expect(value).toBeGreaterThanOrEqual(0));

    // Costs the vCPU some seconds under TCG; then N MiB written through to the disk.
    await vms.typeOnConsole(VM, "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo work''-done");
    await vms.waitForConsole(VM, 'work-done\r');
    await queried(cpu, (value) => expect(value).toBeGreaterThan(cpuBefore + 2));
    await vms.typeOnConsole(
      VM,
      `dd if=/dev/zero of=/dev/vda bs=1M count=${WRITTEN_MIB} conv=fsync 2>/dev/null; echo write''-done`,
    );
    await vms.waitForConsole(VM, 'write-done\r');
    await queried(written, (value) =>
      expect(Math.abs(value! - writtenBefore - WRITTEN_MIB * MiB)).toBeLessThanOrEqual(
        0.1 * WRITTEN_MIB * MiB,
      ),
    );
    // Labelled by the runner: the VM's namespace, name and node.
    const node = (await vms.getVm(VM)).status?.node;
    expect(await prometheus.query(`vmop_vm_guest_agent_connected{${of}}`)).toEqual([
      { labels: expect.objectContaining({ namespace: NAMESPACE, name: VM, node }), value: 1 },
    ]);
  });

  it('shows a live migration and its operation in the managers’ series, and the VM on its new node', async () => {
    const [one, two] = bed.state().cluster.nodes as [string, string];
    const migrated = 'sum(max by (instance) (vmop_vm_migrations_total{result="succeeded"}))';
    const before = (await prometheus.value(migrated)) ?? 0;
    const from = (await vms.getVm(VM)).status?.node;
    const to = from === one ? two : one;
    const opName = `${VM}-migrate`;
    await vms.apply(`apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineOperation
metadata: {name: ${opName}, namespace: ${NAMESPACE}}
spec: {virtualMachineName: ${VM}, type: Migrate, migrate: {nodeName: ${to}}}
`);
    await vms.waitForVm(VM, (vm) => expect(vm.status?.node).toBe(to), 300_000);
    await queried(migrated, (value) => expect(value).toBeGreaterThan(before));
    await queried('max(vmop_vm_migration_downtime_seconds_count)', (value) =>
      expect(value).toBeGreaterThan(0),
    );
    await queried('max(vmop_vm_operation_count{type="Migrate",phase="Completed"})', (value) =>
      expect(value).toBeGreaterThanOrEqual(1),
    );
    // The VM's series come from the runner on its new node now.
    await eventually(async () =>
      expect(await prometheus.query(`vmop_vm_uptime_seconds{${of}}`)).toEqual([
        { labels: expect.objectContaining({ node: to }), value: expect.any(Number) },
      ]),
    );
  });
});
