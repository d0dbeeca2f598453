// VMs on two nodes (issue 24 §4): `kubectl drain` moves a VM that cannot migrate by shutting it
// down and starting it on the other node; anti-affinity between VMs holds through a drain; a lost
// node's VMs show it, never run twice, and run elsewhere once the node is gone for sure.
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useDevBed } from '../support/beds.js';
import { isRunning } from '../../src/util/process.js';
import {
  SHARED_DATA_DISK,
  placedOn,
  testGuestManifest,
  type ClusterVms,
  type Vm,
} from '../support/cluster-vms.js';
import { qemuProcess } from '../support/qemu-process.js';

const NAMESPACE = 'nodes';
const READY = 'VMOP-GUEST-READY';
const OUT_OF_SERVICE = 'node.kubernetes.io/out-of-service';

describe('VMs on two nodes: drain, placement, node loss', () => {
  let vms: ClusterVms;
  const [one, two] = ['vmop-node-1', 'vmop-node-2'];
  const applyVm = (name: string, spec: string, vm = '') =>
    vms.apply(
      testGuestManifest(name, NAMESPACE, { extraSpec: spec }).replace(
        '    networks: []\n',
        `    networks: []\n${vm}`,
      ),
    );
  const runsOn = (name: string, node: string, notRunId?: string) =>
    vms.waitForVm(name, (vm) => {
      expect(vm.status?.phase).toBe('Running');
      expect(vms.condition(vm, 'Booted')?.status).toBe('True');
      expect(vm.status?.node).toBe(node);
      if (notRunId) expect(vm.status?.runner?.runId).not.toBe(notRunId);
    });
  const kubectl = (...args: string[]) => vms.kubectl(args);

  // The last test loses node 2 (and brings it back): this suite runs after the others on its bed.
  const bed = useDevBed('dev-2', { namespaces: [NAMESPACE] });
  beforeAll(() => {
    vms = bed.vms(NAMESPACE);
  });
  // Whatever a test left of a drain or a lost node, the next file finds both nodes as they were.
  afterAll(async () => {
    await bed.vmop('dev', 'node', 'start', two);
    await kubectl('taint', 'node', two, `${OUT_OF_SERVICE}-`).catch(() => undefined);
    for (const node of [one, two]) await kubectl('uncordon', node);
    await kubectl('wait', '--for=condition=Ready', 'node', one, two, '--timeout=120s');
  }, 300_000);

  it('`kubectl drain` of a VM that may not migrate: it shuts down gracefully and starts on the other node; the drain completes', async () => {
    await applyVm('cold', placedOn(one, '  evictionStrategy: None\n'));
    const before = await runsOn('cold', one);
    await vms.waitForConsole('cold', READY);
    try {
      await kubectl('drain', one, '--ignore-daemonsets', '--timeout=240s');
      const after = await runsOn('cold', two, before.status?.runner?.runId);
      expect(after.status?.runnerPod?.name).toBe('cold');
      // Shut down gracefully first (through the guest agent), as asked.
      expect(after.status?.lastShutdown).toMatchObject({ guestInitiated: true, requested: true });
      expect(await vms.eventReasons('cold')).toContain('StoppedByRequest');
    } finally {
      await kubectl('uncordon', one);
    }
    await kubectl('delete', 'vm', 'cold', '--wait=false');
  });

  it('anti-affinity between two VMs holds through a drain: the drained one waits rather than join the other', async () => {
    const apart = `    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector: {matchLabels: {pair: db}}
        topologyKey: kubernetes.io/hostname
`;
    const pair = (name: string, node: string) =>
      vms.apply(
        testGuestManifest(name, NAMESPACE, { extraSpec: placedOn(node, apart) }).replace(
          `metadata: {name: ${name}, namespace: ${NAMESPACE}}`,
          `metadata: {name: ${name}, namespace: ${NAMESPACE}, labels: {pair: db}}`,
        ),
      );
    await pair('pair-a', one);
    await pair('pair-b', two);
    const [a, b] = [await runsOn('pair-a', one), await runsOn('pair-b', two)];
    expect(a.status?.node).not.toBe(b.status?.node);
    await kubectl('drain', one, '--ignore-daemonsets', '--timeout=240s').catch(async (err: unknown) => {
      await kubectl('uncordon', one);
      throw err;
    });
    const waiting = await vms.waitForVm('pair-a', (vm) => {
      expect(vm.status?.phase).toBe('Pending');
      expect(vms.condition(vm, 'Running')?.message).toMatch(
        /didn't match pod anti-affinity rules|node\(s\) were unschedulable/,
      );
    });
    expect(waiting.status?.node).toBeUndefined();
    expect((await vms.getVm('pair-b')).status?.node).toBe(two);
    await kubectl('uncordon', one);
    await runsOn('pair-a', one, a.status?.runner?.runId);
    for (const name of ['pair-a', 'pair-b']) await kubectl('delete', 'vm', name, '--wait=false');
  });

  it('a lost node: its VM shows it within 60 s and never runs twice; once the node is out of service it runs on the other node, its shared disk intact', async () => {
    await applyVm('lost', placedOn(two), SHARED_DATA_DISK);
    await applyVm('lost-manual', `  runPolicy: Manual\n${placedOn(two)}`);
    await runsOn('lost', two);
    await runsOn('lost-manual', two);
    const data = `before-the-node-was-lost-${process.pid}`;
    await vms.waitForConsole('lost', READY);
    await vms.typeOnConsole('lost', `echo ${data} | dd of=/dev/vda conv=fsync 2>/dev/null; echo writ''ten`);
    await vms.waitForConsole('lost', 'written');
    const { cgroupRoot } = bed.state().nodeServices.find((node) => node.node === two)!;
    const qemu = await qemuProcess('lost', cgroupRoot);

    // kubelet and containerd stop: the node goes NotReady, its qemu runs on.
    const lostAt = Date.now();
    await bed.vmop('dev', 'node', 'stop', two);
    const unknown = await vms.waitForVm(
      'lost',
      (vm) => {
        expect(vm.status?.phase).toBe('Unknown');
        expect(vms.condition(vm, 'NodeReachable')).toMatchObject({ status: 'False', reason: 'NodeNotReady' });
      },
      60_000,
    );
    console.log(`node lost: status Unknown after ${Date.now() - lostAt} ms`);
    expect(vms.condition(unknown, 'NodeReachable')?.message).toContain(two);
    // No second copy while the old one may still write the disk.
    await sleep(30_000);
    expect(isRunning(qemu!)).toBe(true);
    const pods = JSON.parse(
      await kubectl('get', 'pods', '-l', 'app.kubernetes.io/instance=lost', '-o', 'json'),
    );
    expect(pods.items.map((p: { spec: { nodeName: string } }) => p.spec.nodeName)).toEqual([two]);

    // The admin makes sure it is down (here: its pods' processes die, as at a power loss), then says so.
    await bed.vmop('dev', 'node', 'power-off', two);
    const taintedAt = Date.now();
    await kubectl('taint', 'node', two, `${OUT_OF_SERVICE}=nodeshutdown:NoExecute`);
    await vms.waitForVm(
      'lost',
      (vm) => {
        expect(vm.status?.phase).toBe('Running');
        expect(vm.status?.node).toBe(one);
      },
      60_000,
    );
    console.log(`node out of service: the VM runs on the other node after ${Date.now() - taintedAt} ms`);
    await vms.waitForConsole('lost', READY);
    await vms.typeOnConsole(
      'lost',
      `dd if=/dev/vda bs=512 count=1 2>/dev/null | head -c ${data.length}; echo`,
    );
    await vms.waitForConsole('lost', `${data}\r`);
    // runPolicy Manual: the lost runner is not replaced.
    const manual = await vms.waitForVm(
      'lost-manual',
      (vm) => {
        expect(vm.spec.vm.state).toBe('Stopped');
        expect(vm.status?.phase).toBe('Stopped');
      },
      60_000,
    );
    expect(vms.condition(manual as Vm, 'Running')?.status).toBe('False');
    expect(await vms.eventReasons('lost-manual')).toContain('RunnerLost');

    // The node comes back: nothing of the VM runs there again.
    await kubectl('taint', 'node', two, `${OUT_OF_SERVICE}-`);
    await bed.vmop('dev', 'node', 'start', two);
    await kubectl('wait', '--for=condition=Ready', `node/${two}`, '--timeout=120s');
    await sleep(10_000);
    expect(await qemuProcess('lost', cgroupRoot)).toBeUndefined();
    expect((await vms.getVm('lost')).status?.node).toBe(one);
    // Two boots, a node lost, a boot elsewhere and the node back: its waits add up past 300 s.
  }, 600_000);
});
