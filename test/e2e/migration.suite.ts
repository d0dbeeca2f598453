// Live migration on two nodes (issue 24 §3, §4): Migrate and Evict move a running guest to the other
// node without a reboot (its counter goes on, its uptime too, its disk keeps what was written),
// on shared storage and with a node-local disk copied while the guest runs; a migration whose
// target goes away leaves the guest running where it was with nothing left behind; what cannot
// migrate is refused with a reason, or (Evict) moved cold, and says why; a drain moves VMs live.
import { setTimeout as sleep } from 'node:timers/promises';
import { beforeAll, describe, expect, it } from 'vitest';
import { useDevBed } from '../support/beds.js';
import { eventually } from '../support/eventually.js';
import { placedOn, testGuestManifest, tickOf, type ClusterVms, type Vm } from '../support/cluster-vms.js';
import { SPICE_LINK_OK, SPICE_LINK_PERMISSION_DENIED } from '../support/spice-login.js';
import { spiceLoginFrom } from '../support/spice-login-from.js';
import { PCR16_AFTER_EXTEND, PCR16_EXTEND } from '../support/tpm.js';
import { signalRecorded } from '../support/qemu-process.js';

const NAMESPACE = 'migration';
const READY = 'VMOP-GUEST-READY';
/** The mover's SPICE console (on its runner pod's address) and its password. */
const SPICE_PORT = 5931;
const SPICE_PASSWORD = 'same-console-after-the-move';
/** The VM's own address (the bed gives VMs addresses of their own): its NIC has it, by DHCP. */
const ownAddress = (vm: Vm) => {
  expect(vm.status?.virtualMachineIPAddressName).toBeTruthy();
  expect(vm.status?.ipAddresses).toContain(vm.status?.ipAddress);
  return vm.status!.ipAddress!;
};

const disk = (storage: string) => `    disks:
    - volumeClaimTemplate:
        metadata: {name: data}
        spec:
${storage}          resources: {requests: {storage: 16Mi}}
`;
/** On the shared (network) class: both nodes use it, nothing is copied. */
const sharedDisk = disk('          storageClassName: shared\n          accessModes: [ReadWriteMany]\n');
/** On the default, node-local class: copied to the target node while the guest runs. */
const localDisk = disk('');

/** What else a move must carry: the SPICE console's password and the NIC's address; the TPM's state. */
interface MoveChecks {
  spiceAndNic?: boolean;
  tpm?: boolean;
  /** A currentRam set while the guest moves. */
  ramDuring?: string;
}

interface Operation {
  status?: { phase?: string; reason?: string; message?: string; live?: boolean };
}

describe('live migration between two nodes', () => {
  let moves = 0;
  let vms: ClusterVms;
  const [one, two] = ['vmop-node-1', 'vmop-node-2'];
  const kubectl = (...args: string[]) => vms.kubectl(args);
  const applyVm = (name: string, spec: string, vm = '', options: MoveChecks = {}) =>
    vms.apply(
      testGuestManifest(name, NAMESPACE, {
        extraSpec: spec,
        ...(options.spiceAndNic && { spicePort: SPICE_PORT }),
      }).replace('    networks: []\n', `    networks: ${options.spiceAndNic ? '[{user: {}}]' : '[]'}\n${vm}`),
    );
  /** A SPICE login to `name`'s console at its runner pod on `node`, as a viewer on that node would make it. */
  const spiceLogin = async (name: string, node: string, password: string): Promise<number> => {
    const netns = bed.state().nodeServices.find((n) => n.node === node)!.netns;
    const pod = (await vms.getVm(name)).status?.runnerPod?.name ?? name;
    const podIP = await kubectl('get', 'pod', pod, '-o', 'jsonpath={.status.podIP}');
    return spiceLoginFrom(netns, podIP, SPICE_PORT, password);
  };
  /** Sets the console's password in the VM's display Secret and waits until qemu has it. */
  const setSpicePassword = (name: string) => vms.setDisplayPassword(name, SPICE_PASSWORD);
  /**
   * The target pod of the migration begun after `before`, once it exists. The status still names
   * the previous migration's target (after a move, the pod the VM runs in) until the new one names
   * its own: a test that took that one would kill the source.
   */
  const targetPodOf = async (name: string, before: Vm): Promise<string> => {
    const previous = before.status?.migrationState?.targetPod;
    for (let waited = 0; waited < 120_000; waited += 100) {
      const state = (await vms.getVm(name)).status?.migrationState;
      const target = state?.targetPod;
      if (target && target !== previous && !state.result) {
        if ((await podsOf(name)).some((pod) => pod.metadata.name === target)) return target;
      }
      await sleep(100);
    }
    throw new Error(`no target pod of a new migration of ${name} in 120 s (the last was ${previous})`);
  };
  const runsOn = (name: string, node: string) =>
    vms.waitForVm(name, (vm) => {
      expect(vm.status?.phase).toBe('Running');
      expect(vms.condition(vm, 'Booted')?.status).toBe('True');
      expect(vm.status?.node).toBe(node);
    });
  /** Creates an operation, does what else is to be done `during` it, and waits until it ended. */
  async function operate(
    name: string,
    type: string,
    spec = '',
    during?: () => Promise<void>,
  ): Promise<Operation> {
    const opName = `${name}-${type.toLowerCase()}-${Date.now()}`;
    await vms.apply(`apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineOperation
metadata: {name: ${opName}, namespace: ${NAMESPACE}}
spec: {virtualMachineName: ${name}, type: ${type}${spec}}
`);
    await during?.();
    let op: Operation = {};
    for (let waited = 0; waited < 300_000; waited += 500) {
      op = JSON.parse(await kubectl('get', 'vmop', opName, '-o', 'json'));
      if (['Completed', 'Failed', 'Superseded'].includes(op.status?.phase ?? '')) return op;
      await sleep(500);
    }
    throw new Error(`${opName} did not end: ${JSON.stringify(op.status)}`);
  }
  /** Changes currentRam once the migration has its target pod (the guest is on its way). */
  async function setRamMidway(name: string, ram: string): Promise<void> {
    for (let waited = 0; waited < 120_000; waited += 100) {
      const state = (await vms.getVm(name)).status?.migrationState;
      if (state?.targetPod && !state.result) return void (await vms.patchVm(name, { currentRam: ram }));
      await sleep(100);
    }
    throw new Error(`the migration of ${name} made no target pod`);
  }
  /** The last line the guest printed that matches. */
  const lastLine = (name: string, pattern: RegExp) => vms.lastConsoleLine(name, pattern);
  const podsOf = async (name: string) =>
    JSON.parse(await kubectl('get', 'pods', '-l', `app.kubernetes.io/instance=${name}`, '-o', 'json'))
      .items as Array<{
      metadata: { name: string };
      spec: { nodeName?: string };
    }>;
  const claimsOf = async (name: string) =>
    JSON.parse(await kubectl('get', 'pvc', '-l', `app.kubernetes.io/instance=${name}`, '-o', 'json'))
      .items as Array<{ metadata: { name: string; labels: Record<string, string> } }>;

  const bed = useDevBed('dev-2', { namespaces: [NAMESPACE] });
  beforeAll(() => {
    vms = bed.vms(NAMESPACE);
  });

  /**
   * Migrates `name` (running on `from`) with `type` and checks the guest went on: its counter, its
   * uptime, what it wrote to its disk; returns the VM after.
   */
  async function migrateAndCheck(
    name: string,
    type: 'Migrate' | 'Evict',
    from: string,
    to: string,
    options: MoveChecks = {},
  ) {
    const before = await runsOn(name, from);
    let address = '';
    if (options.spiceAndNic) {
      // The console opens with the password on the source's node, the guest agent reports the VM's
      // own address on its NIC.
      expect(await spiceLogin(name, from, SPICE_PASSWORD)).toBe(SPICE_LINK_OK);
      address = ownAddress(await vms.waitForVm(name, (vm) => void ownAddress(vm), 60_000));
    }
    expect(vms.condition(before, 'Migratable')).toMatchObject({ status: 'True' });
    // Booted once (the console log of this run may start after that, at a migration's arrival).
    await eventually(async () => expect(await vms.wholeConsoleLog(name)).toContain(READY), 120_000, 500);
    const tag = `${name}-${++moves}`;
    const data = `written-before-move-${tag}`;
    await vms.typeOnConsole(
      name,
      `echo ${data} | dd of=/dev/vda conv=fsync 2>/dev/null; echo written-${tag}`,
    );
    await vms.waitForConsole(name, `\nwritten-${tag}\r`);
    await vms.typeOnConsole(name, `cut -d" " -f1 /proc/uptime | sed s/^/uptime-${tag}-/`);
    await vms.waitForConsole(name, `\nuptime-${tag}-`);
    const uptimeOf = async () =>
      Number((await lastLine(name, new RegExp(`^uptime-${tag}-`)))!.split('-').pop());
    const uptimeBefore = await uptimeOf();
    // A counter the guest prints every 100 ms: it must go on across the move, not start over.
    await vms.typeOnConsole(name, '(i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.1; done) &');
    await vms.waitForConsole(name, '\ntick-20\r');
    const tickBefore = tickOf(await lastLine(name, /^tick-\d+$/));

    const op = await operate(
      name,
      type,
      '',
      options.ramDuring ? () => setRamMidway(name, options.ramDuring!) : undefined,
    );
    expect(op.status, JSON.stringify(op.status)).toMatchObject({ phase: 'Completed', live: true });
    expect(op.status?.message).toContain(`moved live from ${from} to ${to}`);
    const after = await runsOn(name, to);
    expect(after.status?.runner?.runId).not.toBe(before.status?.runner?.runId); // another runner…
    expect(after.status?.migrationState).toMatchObject({
      result: 'Succeeded',
      sourceNode: from,
      targetNode: to,
      sourcePod: before.status?.runnerPod?.name,
      targetPod: after.status?.runnerPod?.name,
    });
    expect(after.status?.migrationState?.downtimeMs).toBeGreaterThan(0);
    expect(after.status?.migrationState?.bytesTransferred).toBeGreaterThan(0);
    expect(after.status?.lastShutdown?.time).toBe(before.status?.lastShutdown?.time); // …no shutdown
    // Only the target's pod is left.
    await vms.waitForVm(name, () => undefined);
    for (let waited = 0; (await podsOf(name)).length > 1 && waited < 30_000; waited += 500) await sleep(500);
    expect((await podsOf(name)).map((pod) => pod.spec.nodeName)).toEqual([to]);

    // The same guest: the counter went on from where it was, its uptime too, its disk has the data.
    await sleep(2_000);
    const ticks = (await vms.consoleLog(name)).split(/\r?\n/).filter((line) => /^tick-\d+$/.test(line));
    expect(tickOf(ticks[0])).toBeGreaterThanOrEqual(tickBefore); // the first since the move
    const tick = tickOf(ticks.pop());
    await sleep(1_000);
    expect(tickOf(await lastLine(name, /^tick-\d+$/))).toBeGreaterThan(tick);
    await vms.typeOnConsole(name, `kill %1; cut -d" " -f1 /proc/uptime | sed s/^/uptime-${tag}-/`);
    await vms.waitForConsole(name, `\nuptime-${tag}-`);
    expect(await uptimeOf()).toBeGreaterThan(uptimeBefore);
    await vms.typeOnConsole(name, `dd if=/dev/vda bs=512 count=1 2>/dev/null | head -c ${data.length}; echo`);
    await vms.waitForConsole(name, `${data}\r`);
    expect(await vms.eventReasons(name)).toContain('Migrated');
    // The guest agent answers the new runner (its connection does not survive the move).
    await vms.waitForVm(
      name,
      (vm) => expect(vms.condition(vm, 'AgentConnected')?.status).toBe('True'),
      60_000,
    );
    if (options.ramDuring) {
      // The change made while the guest moved waited for it, and reached the guest where it went.
      await vms.waitForVm(name, (vm) => expect(vm.status?.ram).toBe(options.ramDuring), 60_000);
    }
    if (options.tpm) {
      // The TPM's state in swtpm's memory came along (PCR 16, extended once after the first boot).
      await vms.typeOnConsole(name, `sed s/^/pcr-${tag}-/ /sys/class/tpm/tpm0/pcr-sha256/16`);
      await vms.waitForConsole(name, `\npcr-${tag}-${PCR16_AFTER_EXTEND}\r`);
    }
    if (options.spiceAndNic) {
      // The guest kept its address; the console opens on the new node with the password of before.
      await vms.waitForVm(name, (vm) => expect(ownAddress(vm)).toBe(address), 60_000);
      await vms.typeOnConsole(name, `ip -4 addr show eth0 | grep -o 'inet [0-9.]*' | sed s/^/ip-${tag}-/`);
      await vms.waitForConsole(name, `\nip-${tag}-inet ${address}\r`);
      expect(await spiceLogin(name, to, SPICE_PASSWORD)).toBe(SPICE_LINK_OK);
      expect(await spiceLogin(name, to, 'guessed')).toBe(SPICE_LINK_PERMISSION_DENIED);
    }
    return after;
  }

  it('Migrate moves a running VM on shared storage to the other node and back; the guest goes on, its IP, console password and TPM state too', async () => {
    await applyVm('mover', placedOn(one), `    useTpm: true\n${sharedDisk}`, { spiceAndNic: true });
    await runsOn('mover', one);
    await setSpicePassword('mover');
    await vms.waitForConsole('mover', READY);
    await vms.typeOnConsole('mover', `${PCR16_EXTEND} && echo extended-$((6*7))`);
    await vms.waitForConsole('mover', '\nextended-42\r');
    const checks = { spiceAndNic: true, tpm: true };
    await migrateAndCheck('mover', 'Migrate', one, two, checks);
    const back = await migrateAndCheck('mover', 'Migrate', two, one, checks);
    expect(back.status?.runnerPod?.name).toMatch(/^mover-m[0-9a-f]{8}$/);
  });

  it('Evict moves a VM with a node-local disk live: the disk is copied, the old claim goes; a RAM change made meanwhile applies after', async () => {
    await applyVm('local', placedOn(one), localDisk);
    // Its claims exist once it runs (read at once after the apply, the manager may not have made them).
    await runsOn('local', one);
    const before = await claimsOf('local');
    const after = await migrateAndCheck('local', 'Evict', one, two, { ramDuring: '192Mi' });
    expect(after.status?.migrationState?.copiedDisks).toEqual(['data-disk']);
    // The copy's claim backs the disk now; the source's is gone (once its pod is).
    for (let waited = 0; waited < 60_000; waited += 1000) {
      const names = (await claimsOf('local')).map((claim) => claim.metadata.name);
      if (!names.includes('local-data-disk')) break;
      await sleep(1000);
    }
    const claims = await claimsOf('local');
    expect(claims.map((claim) => claim.metadata.name).sort()).toEqual(
      [
        before.find((c) => c.metadata.name.endsWith('runner-data'))!.metadata.name,
        `local-data-disk-${after.status?.migrationState?.id}`,
      ].sort(),
    );
    expect(claims.every((claim) => !claim.metadata.labels['vmoperator.jdrupes.org/migration'])).toBe(true);
  });

  it('a migration whose target pod goes away: the guest runs on at the source, untouched, and nothing is left', async () => {
    const before = await runsOn('mover', one);
    const opName = `mover-migrate-killed-${Date.now()}`;
    await vms.apply(`apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineOperation
metadata: {name: ${opName}, namespace: ${NAMESPACE}}
spec: {virtualMachineName: mover, type: Migrate}
`);
    // The target pod is killed as soon as it exists.
    const target = await targetPodOf('mover', before);
    await kubectl('delete', 'pod', target, '--grace-period=0', '--force', '--wait=false');
    const op = await vms
      .waitForVm('mover', () => undefined)
      .then(async () => {
        for (;;) {
          const current: Operation = JSON.parse(await kubectl('get', 'vmop', opName, '-o', 'json'));
          if (current.status?.phase === 'Failed' || current.status?.phase === 'Completed') return current;
          await sleep(500);
        }
      });
    expect(op.status, JSON.stringify(op.status)).toMatchObject({ phase: 'Failed' });
    expect(op.status?.message).toMatch(/runs on where it was/);
    const after = await runsOn('mover', one);
    expect(after.status?.runner?.runId).toBe(before.status?.runner?.runId); // the same runner and qemu
    expect(after.status?.runnerPod).toEqual(before.status?.runnerPod);
    expect(after.status?.migrationState).toMatchObject({ result: 'Failed' });
    for (let waited = 0; (await podsOf('mover')).length > 1 && waited < 30_000; waited += 500)
      await sleep(500);
    expect((await podsOf('mover')).map((pod) => pod.metadata.name)).toEqual([before.status?.runnerPod?.name]);
    // The guest still answers.
    await vms.typeOnConsole('mover', "echo still''-here");
    await vms.waitForConsole('mover', 'still-here\r');
    expect(await vms.eventReasons('mover')).toContain('MigrationFailed');
  });

  it("two VMs with one SPICE port share a node: each runner listens in its own pod, so a move onto the other's node goes through", async () => {
    // On the host network (VM-Operator's runner pods) the second QEMU could not bind the port.
    await runsOn('mover', one);
    await vms.apply(
      testGuestManifest('blocker', NAMESPACE, { extraSpec: `  nodeName: ${two}\n`, spicePort: SPICE_PORT }),
    );
    await runsOn('blocker', two);
    const there = await operate('mover', 'Migrate', `, migrate: {nodeName: ${two}}`);
    expect(there.status, JSON.stringify(there.status)).toMatchObject({ phase: 'Completed', live: true });
    await runsOn('mover', two);
    expect((await vms.getVm('blocker')).status?.phase).toBe('Running');
    await kubectl('delete', 'vm', 'blocker', '--wait');
    const back = await operate('mover', 'Migrate', `, migrate: {nodeName: ${one}}`);
    expect(back.status, JSON.stringify(back.status)).toMatchObject({ phase: 'Completed' });
    await runsOn('mover', one);
  });

  it('the managers SIGKILLed mid-way: the restarted ones take the migration up where it stands; the guest runs once, nothing is left', async () => {
    const before = await runsOn('mover', one);
    const opName = `mover-migrate-managers-killed-${Date.now()}`;
    await vms.apply(`apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineOperation
metadata: {name: ${opName}, namespace: ${NAMESPACE}}
spec: {virtualMachineName: mover, type: Migrate}
`);
    // Both replicas die once the target pod was made (vmop dev starts them again, as a Deployment would).
    await targetPodOf('mover', before);
    const killed = bed.state().managers;
    for (const manager of killed) signalRecorded(manager);
    let op: Operation = {};
    for (let waited = 0; waited < 180_000; waited += 500) {
      op = JSON.parse(await kubectl('get', 'vmop', opName, '-o', 'json'));
      if (op.status?.phase === 'Completed' || op.status?.phase === 'Failed') break;
      await sleep(500);
    }
    expect(bed.state().managers.map((manager) => manager.pid)).not.toEqual(killed);
    expect(op.status, JSON.stringify(op.status)).toMatchObject({ phase: 'Completed' });
    const after = await runsOn('mover', two);
    expect(after.status?.migrationState).toMatchObject({
      result: 'Succeeded',
      sourceNode: one,
      targetNode: two,
    });
    expect(after.status?.lastShutdown?.time).toBe(before.status?.lastShutdown?.time);
    for (let waited = 0; (await podsOf('mover')).length > 1 && waited < 30_000; waited += 500)
      await sleep(500);
    expect((await podsOf('mover')).map((pod) => pod.spec.nodeName)).toEqual([two]);
    await vms.typeOnConsole('mover', "echo after-the-managers''-died");
    await vms.waitForConsole('mover', 'after-the-managers-died\r');
    // Back to where the next tests expect it.
    expect((await operate('mover', 'Migrate')).status).toMatchObject({ phase: 'Completed' });
    await runsOn('mover', one);
  });

  it('what cannot migrate: a stopped VM and a move to its own node are refused; a pinned VM is refused Migrate and moved cold by Evict, which says why', async () => {
    await applyVm('resting', placedOn(one));
    await runsOn('resting', one);
    await vms.patchVm('resting', { state: 'Stopped' });
    await vms.waitForVm('resting', (vm) => expect(vm.status?.phase).toBe('Stopped'));
    const stopped = await operate('resting', 'Migrate');
    expect(stopped.status).toMatchObject({ phase: 'Failed', reason: 'NotApplicableForVirtualMachinePhase' });

    const here = await operate('mover', 'Migrate', `, migrate: {nodeName: ${one}}`);
    expect(here.status).toMatchObject({ phase: 'Failed', reason: 'NotMigratable' });
    expect(here.status?.message).toContain(`runs on ${one} already`);

    // A CD from a file of its node only: it cannot move live.
    await applyVm('pinned', placedOn(one), '    disks:\n    - cdrom: {image: /etc/os-release}\n');
    const pinned = await runsOn('pinned', one);
    expect(vms.condition(pinned, 'Migratable')).toMatchObject({ status: 'False', reason: 'NodeLocalMedium' });
    const refused = await operate('pinned', 'Migrate');
    expect(refused.status).toMatchObject({ phase: 'Failed', reason: 'NotMigratable' });
    expect(refused.status?.message).toContain('/etc/os-release');
    expect((await vms.getVm('pinned')).status?.runner?.runId).toBe(pinned.status?.runner?.runId);

    const evicted = await operate('pinned', 'Evict');
    expect(evicted.status).toMatchObject({ phase: 'Completed', live: false });
    expect(evicted.status?.message).toMatch(
      /^moved cold, as the CD \/etc\/os-release is a file of its node only/,
    );
    const moved = await vms.waitForVm('pinned', (vm: Vm) => {
      expect(vm.status?.runner?.runId).not.toBe(pinned.status?.runner?.runId);
    });
    expect(moved.status?.migrationState).toBeUndefined();
    const messages = await vms.eventMessages('pinned');
    expect(messages.join('\n')).toMatch(/moved cold, as the CD \/etc\/os-release/);
  });

  it('`kubectl drain` of a node with two VMs, one of them moved there a moment before: the evictions wait, vmop moves both live at once, the drain completes, no guest stopped', async () => {
    const before = await runsOn('mover', one);
    // Its budget refuses the eviction of its runner pod while it can move live, computed by the
    // disruption controller from the pod it found (not refused by its fail-safe after a failure).
    await expect
      .poll(async () => JSON.parse(await kubectl('get', 'pdb', 'mover', '-o', 'json')).status)
      .toMatchObject({
        expectedPods: 1,
        currentHealthy: 1,
        disruptionsAllowed: 0,
        conditions: [expect.objectContaining({ type: 'DisruptionAllowed', reason: 'InsufficientPods' })],
      });
    // 'local' (with its node-local disk) comes to the drained node first: the drain asks its new
    // runner to move again at once (kubelet's sync is 5 minutes here: a request that waited on
    // kubelet's copy of the pod's annotations stalled the drain for minutes).
    await runsOn('local', two);
    expect((await operate('local', 'Migrate')).status).toMatchObject({ phase: 'Completed' });
    const arrived = await runsOn('local', one);
    try {
      const drainedFrom = Date.now();
      // The bound is a deadline for what must happen, not a measure: two moves take seconds.
      await kubectl('drain', one, '--ignore-daemonsets', '--timeout=150s');
      console.log(`a drain of two VMs, one just moved there: ${Date.now() - drainedFrom} ms`);
      for (const [name, was] of [
        ['mover', before],
        ['local', arrived],
      ] as const) {
        const after = await runsOn(name, two);
        expect(after.status?.migrationState).toMatchObject({
          result: 'Succeeded',
          sourceNode: one,
          targetNode: two,
          operation: expect.stringMatching(new RegExp(`^${name}-evacuate-`)),
        });
        expect(after.status?.lastShutdown?.time).toBe(was.status?.lastShutdown?.time);
        expect(await vms.eventReasons(name)).toEqual(expect.arrayContaining(['Evacuating', 'Migrated']));
      }
    } finally {
      await kubectl('uncordon', one);
    }
  });
});
