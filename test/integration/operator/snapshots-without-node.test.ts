// VM snapshots against a real apiserver and Redis, with one manager process and no node: the VMs are
// stopped and never ran, so their snapshots hold their spec, Secrets and no volume, and the real
// snapshot reconcile makes them Ready at once. Here: what a schedule does (runs on its cron, the
// selector, retention, suspend, a bad schedule said in status, snapshots kept when it goes), and the
// provisioning Secrets a snapshot keeps and a clone gets. (Volumes copied: test/e2e/snapshots.suite.ts.)
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { installCrds } from '../../../src/devenv/install-crds.js';
import { startRedis, type RedisServer } from '../../../src/devenv/redis.js';
import { LABEL_SCHEDULE } from '../../../src/reconcilers/virtual-machine/naming.js';
import { eventually } from '../../support/eventually.js';
import { createTestNamespace, kubectl, sharedKubeConfig, type TestNamespace } from '../../support/kube.js';
import { startManagerProcess, type ManagerProcess } from '../../support/manager-process.js';

const kubeConfig = sharedKubeConfig();

interface Listed<T> {
  items: T[];
}
interface Snapshot {
  metadata: { name: string; annotations?: Record<string, string> };
  spec: { virtualMachineName: string };
  status?: { phase?: string };
}
interface Schedule {
  status?: {
    lastScheduleTime?: string;
    nextScheduleTime?: string;
    message?: string;
    virtualMachines?: Array<{ name: string; readySnapshots?: number }>;
    conditions?: Array<{ type: string; status: string; reason: string; message: string }>;
  };
}

describe('VM snapshots without a node: schedules, provisioning Secrets (real apiserver, one manager)', () => {
  let namespace: TestNamespace;
  let redis: RedisServer;
  let manager: ManagerProcess;
  let metricsPort = 0;
  const ns = () => namespace.name;
  const get = async <T>(...args: string[]) =>
    JSON.parse(await kubectl(['get', ...args, '-n', ns(), '-o', 'json'])) as T;
  const snapshotsOf = async (schedule: string) =>
    (await get<Listed<Snapshot>>('vmsnapshot', '-l', `${LABEL_SCHEDULE}=${schedule}`)).items;
  const schedule = (name: string, spec: string) => `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineSnapshotSchedule
metadata: {name: ${name}, namespace: ${ns()}}
spec: ${spec}
`;
  const vm = (name: string, labels: string) => `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata: {name: ${name}, namespace: ${ns()}, labels: ${labels}}
spec:
  vm: {state: Stopped, maximumRam: 256Mi}
`;

  beforeAll(async () => {
    await installCrds(kubeConfig);
    namespace = await createTestNamespace(kubeConfig, 'vmop-snapshots');
    redis = await startRedis();
    manager = startManagerProcess([
      '--kubeconfig',
      inject('kubeconfigPath'),
      '--redis',
      redis.url,
      '-n',
      ns(),
    ]);
    metricsPort = (await manager.waitForLog((l) => l.msg === 'manager started')).metricsPort as number;
    await kubectl(['apply', '-f', '-'], vm('web', '{backup: "yes"}') + '---\n' + vm('scratch', '{}'));
  });

  afterAll(async () => {
    await manager?.stop();
    await redis?.stop();
    await namespace?.cleanup();
    expect(manager.logs.filter((l) => l.level >= 50)).toEqual([]);
  });

  it('snapshots the VMs its selector picks at each run, keeping the newest `keep` Ready ones', async () => {
    await kubectl(
      ['apply', '-f', '-'],
      schedule('often', '{schedule: "*/3 * * * * *", keep: 2, selector: {matchLabels: {backup: "yes"}}}'),
    );
    // Four runs at least: two more than it keeps.
    const seen = new Set<string>();
    await eventually(
      async () => {
        for (const snapshot of await snapshotsOf('often')) seen.add(snapshot.metadata.name);
        expect(seen.size).toBeGreaterThanOrEqual(4);
      },
      60_000,
      500,
    );
    const kept = await eventually(async () => {
      const snapshots = await snapshotsOf('often');
      const ready = snapshots.filter((s) => s.status?.phase === 'Ready');
      expect(ready).toHaveLength(2);
      return snapshots;
    }, 30_000);
    // Only web's, one per run, the newest kept (a third may be just taken, not Ready yet).
    expect(kept.every((s) => s.spec.virtualMachineName === 'web')).toBe(true);
    expect(kept.length).toBeLessThanOrEqual(3);
    // Runs taken since the first wait ended are runs too (on a loaded machine the second wait
    // can outlast a run or two): the kept ones are compared with every run seen.
    for (const snapshot of kept) seen.add(snapshot.metadata.name);
    const runs = [...seen].map((name) => name.slice(-14)).sort();
    expect(new Set(runs).size).toBe(seen.size);
    for (const snapshot of kept) expect(runs.slice(-3)).toContain(snapshot.metadata.name.slice(-14));

    const { status } = await get<Schedule>('vmsnapshotschedule', 'often');
    expect(status?.conditions).toMatchObject([{ type: 'Ready', status: 'True', reason: 'Scheduled' }]);
    expect(status?.virtualMachines).toEqual([expect.objectContaining({ name: 'web' })]);
    expect(Date.parse(status!.nextScheduleTime!)).toBeGreaterThan(Date.parse(status!.lastScheduleTime!));
    const table = await kubectl(['get', 'vmsnapshotschedule', 'often', '-n', ns()]);
    expect(table).toMatch(/NAME\s+SCHEDULE\s+KEEP\s+SUSPEND\s+LAST\s+NEXT\s+FAILURES\s+AGE/);
    expect(table).toMatch(/often\s+\*\/3 \* \* \* \* \*\s+2\s+false/);
    const events = await kubectl([
      'get',
      'events',
      '-n',
      ns(),
      '--field-selector',
      'involvedObject.name=often',
      '-o',
      'jsonpath={.items[*].reason}',
    ]);
    expect(events).toContain('SnapshotsTaken');
    expect(events).toContain('SnapshotsDeleted');
    const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    expect(metrics).toContain(
      `vmop_snapshot_schedule_consecutive_failures{namespace="${ns()}",name="often"} 0`,
    );
    expect(metrics).toMatch(/vmop_vm_snapshot_count\{phase="Ready"\} [1-9]/);
  });

  it('takes none while suspended, and when deleted keeps what it took', async () => {
    await kubectl([
      'patch',
      'vmsnapshotschedule',
      'often',
      '-n',
      ns(),
      '--type',
      'merge',
      '-p',
      '{"spec":{"suspend":true}}',
    ]);
    await eventually(async () => {
      const { status } = await get<Schedule>('vmsnapshotschedule', 'often');
      expect(status?.conditions).toMatchObject([{ status: 'False', reason: 'Suspended' }]);
    }, 20_000);
    const before = (await snapshotsOf('often')).map((s) => s.metadata.name).sort();
    await new Promise((resolve) => setTimeout(resolve, 7_000)); // two runs' time
    expect((await snapshotsOf('often')).map((s) => s.metadata.name).sort()).toEqual(before);

    await kubectl(['delete', 'vmsnapshotschedule', 'often', '-n', ns()]);
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    expect((await snapshotsOf('often')).map((s) => s.metadata.name).sort()).toEqual(before);
  });

  it('a schedule that is no cron expression, or a time zone that is none, is said in its status', async () => {
    await kubectl(['apply', '-f', '-'], schedule('typo', '{schedule: "0 25 * * *", keep: 1}'));
    await kubectl(
      ['apply', '-f', '-'],
      schedule('zone', '{schedule: "0 3 * * *", timeZone: "Mars/Olympus", keep: 1}'),
    );
    await eventually(async () => {
      const typo = await get<Schedule>('vmsnapshotschedule', 'typo');
      expect(typo.status?.conditions).toMatchObject([{ status: 'False', reason: 'InvalidSchedule' }]);
      expect(typo.status?.message).toContain('spec.schedule (0 25 * * *) is no schedule');
      const zone = await get<Schedule>('vmsnapshotschedule', 'zone');
      expect(zone.status?.message).toContain('in Mars/Olympus) is no schedule');
    }, 20_000);
    expect(await snapshotsOf('typo')).toEqual([]);
  });

  it("a snapshot keeps the VM's cloud-init Secret as it was; a clone gets a copy of its own; a missing one fails the snapshot", async () => {
    const secret = (userData: string) => `apiVersion: v1
kind: Secret
metadata: {name: web-init, namespace: ${ns()}}
stringData: {userData: "${userData}"}
`;
    const provisioned = (name: string, secretName: string) =>
      vm(name, '{}').replace('spec:\n', `spec:\n  cloudInit: {secretRef: {name: ${secretName}}}\n`);
    await kubectl(
      ['apply', '-f', '-'],
      secret('#cloud-config\\npassword: before') + '---\n' + provisioned('provisioned', 'web-init'),
    );
    const snapshotOf = (name: string, vmName: string) => `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineSnapshot
metadata: {name: ${name}, namespace: ${ns()}}
spec: {virtualMachineName: ${vmName}}
`;
    await kubectl(['apply', '-f', '-'], snapshotOf('kept', 'provisioned'));
    await eventually(async () => {
      const { status } = await get<Snapshot & { status?: { virtualMachine?: { secrets?: unknown } } }>(
        'vmsnapshot',
        'kept',
      );
      expect(status?.phase).toBe('Ready');
      expect(status?.virtualMachine?.secrets).toEqual([
        { field: 'cloudInit', name: 'web-init', copyName: 'kept-cloud-init' },
      ]);
    }, 30_000);
    const userData = async (name: string) =>
      Buffer.from(
        await kubectl(['get', 'secret', name, '-n', ns(), '-o', 'jsonpath={.data.userData}']),
        'base64',
      ).toString();
    const ownerOf = (name: string) =>
      kubectl([
        'get',
        'secret',
        name,
        '-n',
        ns(),
        '-o',
        'jsonpath={.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}',
      ]);
    await kubectl(['apply', '-f', '-'], secret('#cloud-config\\npassword: after'));
    expect(await userData('kept-cloud-init')).toBe('#cloud-config\npassword: before');
    expect(await ownerOf('kept-cloud-init')).toBe('VirtualMachineSnapshot/kept');

    await kubectl(
      ['apply', '-f', '-'],
      `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineClone
metadata: {name: copy, namespace: ${ns()}}
spec: {virtualMachineSnapshotName: kept, newVirtualMachineName: provisioned-2}
`,
    );
    await eventually(async () => {
      expect(
        await kubectl([
          'get',
          'vm',
          'provisioned-2',
          '-n',
          ns(),
          '-o',
          'jsonpath={.spec.cloudInit.secretRef.name}',
        ]),
      ).toBe('provisioned-2-cloud-init');
      expect(await ownerOf('provisioned-2-cloud-init')).toBe('VirtualMachine/provisioned-2');
    }, 30_000);
    expect(await userData('provisioned-2-cloud-init')).toBe('#cloud-config\npassword: before');

    await kubectl(
      ['apply', '-f', '-'],
      provisioned('unprovisioned', 'no-such-secret') + '---\n' + snapshotOf('lacking', 'unprovisioned'),
    );
    await eventually(async () => {
      const { status } = await get<Snapshot & { status?: { message?: string } }>('vmsnapshot', 'lacking');
      expect(status?.phase).toBe('Failed');
      expect(status?.message).toBe(
        'Secret no-such-secret (spec.cloudInit.secretRef of the VM) does not exist: the VM could not be provisioned from this snapshot',
      );
    }, 30_000);
  });
});
