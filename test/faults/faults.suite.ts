// The fault suite: a real single-node vmop (control plane, kubelet, containerd, Redis, two
// managers: the dev bed, which it is the last to use) and a VM booting the test guest; then one
// part at a time is killed with SIGKILL,
// as a crash or the OOM killer would. After each: the status tells the truth, nothing stalls, no
// key or process is lost or left over, and the recovery time is printed. Bounds are deadlines for
// a recovery that must happen, stated per fault; they are not performance thresholds.
import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RunnerSnapshot, snapshotRedisKey } from '../../src/api/runner-snapshot.js';
import { isRunning, signalProcess, type ProcessRef } from '../../src/util/process.js';
import { WATCHED } from '../../src/operator/watch-edge.js';
import { useDevBed } from '../support/beds.js';
import { testGuestManifest, type ClusterVms, type Vm } from '../support/cluster-vms.js';
import { eventually } from '../support/eventually.js';
import { nodeProcesses, runnerProcesses } from '../support/qemu-process.js';
import { firstWrite, parseManagerLog, startedAfter } from '../support/manager-logs.js';

const NAMESPACE = 'faults';
const VM = 'faulty';
const KEY = `vm:${NAMESPACE}/${VM}`;
/** Booting the test guest under TCG on two busy cores. */
const BOOT_BOUND_MS = 300_000;

// A booted guest killed and booted again under load: ten minutes a test at most.
describe('faults on a real single-node vmop', { timeout: 600_000 }, () => {
  // Whatever it kills, `vmop dev` starts again; it runs last on its bed all the same.
  const bed = useDevBed('dev', { namespaces: [NAMESPACE] });
  let vms: ClusterVms;
  /** A process of the bed as its state names it now (a restart makes it another one). */
  const processOf = (pick: (state: ReturnType<typeof bed.state>) => ProcessRef) => ({
    get ref(): ProcessRef {
      const { pid, startTime } = pick(bed.state());
      return { pid, startTime };
    },
    alive: () => isRunning(pick(bed.state())),
  });
  /** SIGKILL to a process the test found, only while it is still that process. */
  const kill = (ref: ProcessRef) => expect(signalProcess(ref, 'SIGKILL'), `pid ${ref.pid} runs`).toBe(true);
  const managers = [0, 1].map((i) => processOf((state) => state.managers[i]!));
  let redis: Redis;

  const readSnapshot = async () => {
    const json = await redis.get(snapshotRedisKey(KEY));
    return json ? RunnerSnapshot.parse(JSON.parse(json)) : undefined;
  };
  const condition = (vm: Vm, type: string) => vm.status?.conditions?.find((c) => c.type === type);
  const isBooted = (vm: Vm) => vm.status?.phase === 'Running' && condition(vm, 'Booted')?.status === 'True';
  /** Sums Event counts by reason: a series counts once per occurrence. */
  const eventCounts = async (): Promise<Record<string, number>> => {
    const list = JSON.parse(
      await vms.kubectl([
        'get',
        'events',
        '--field-selector',
        `involvedObject.kind=VirtualMachine,involvedObject.name=${VM}`,
        '-o',
        'json',
      ]),
    ) as { items: Array<{ reason: string; count?: number }> };
    const counts: Record<string, number> = {};
    for (const e of list.items) counts[e.reason] = (counts[e.reason] ?? 0) + (e.count ?? 1);
    return counts;
  };
  /** Waits until `check` passes; returns how long that took from `since`. */
  const recoveredAfter = async (since: number, boundMs: number, check: () => Promise<void>) => {
    await eventually(check, boundMs, 250);
    return Date.now() - since;
  };
  /** Samples the VM's status every 250 ms until stopped: what a user watching `kubectl get vm -w` sees. */
  const sampleStatus = () => {
    const samples: Array<{ phase?: string; booted?: string; cpus?: number }> = [];
    let sampling = true;
    const loop = (async () => {
      while (sampling) {
        const vm = await vms.getVm(VM).catch(() => undefined);
        if (vm)
          samples.push({
            phase: vm.status?.phase,
            booted: condition(vm, 'Booted')?.status,
            cpus: vm.status?.cpus,
          });
        await sleep(250);
      }
    })();
    return async () => {
      sampling = false;
      await loop;
      return samples;
    };
  };
  /** The one runner and the one qemu on this bed's node (host pids: a snapshot's qemuPid is the container's). */
  const cgroupRoot = () => bed.state().nodeServices[0]!.cgroupRoot;
  const onlyOne = (found: ProcessRef[], what: string) => {
    expect(found, what).toHaveLength(1);
    return found[0]!;
  };
  const runnerProcess = async () => onlyOne(await runnerProcesses(cgroupRoot()), 'runners on the node');
  const guestQemu = async () =>
    onlyOne(
      await nodeProcesses(cgroupRoot(), (argv) => argv.includes(`\0guest=${VM},`)),
      'qemus on the node',
    );
  const waitBooted = () => vms.waitForVm(VM, (vm) => expect(isBooted(vm)).toBe(true), BOOT_BOUND_MS);

  beforeAll(async () => {
    vms = bed.vms(NAMESPACE);
    redis = new Redis(bed.state().redisUrl, { maxRetriesPerRequest: null });
    redis.on('error', () => undefined); // it reconnects after the Redis fault
    await vms.apply(testGuestManifest(VM, NAMESPACE));
    await waitBooted();
  }, 1_800_000);

  // The bed's end checks that nothing of it is left: no runner, qemu, kubelet, containerd or manager.
  afterAll(() => redis?.disconnect());

  it('Redis killed and back empty: the VM stays Running and Booted, the runner publishes again, no second Started', async () => {
    const startedBefore = (await eventCounts()).Started;
    const stopSampling = sampleStatus();
    const single = () => {
      const { redis: layout } = bed.state();
      if (layout.layout !== 'single') throw new Error('the dev bed runs one Redis');
      return layout;
    };
    const old = single();
    const killedAt = Date.now();
    kill(old);
    // Bound: the supervisor restarts Redis after 1 s; the runner reconnects and republishes.
    const recoveredMs = await recoveredAfter(killedAt, 60_000, async () => {
      expect(isRunning(old)).toBe(false);
      expect(isRunning(single())).toBe(true);
      expect(await readSnapshot()).toMatchObject({ podUid: expect.any(String), phase: 'running' });
      const vm = await vms.getVm(VM);
      expect(condition(vm, 'RunnerReporting')?.status).toBe('True');
    });
    const samples = await stopSampling();
    console.log(`Redis SIGKILL: snapshot back and status reporting after ${recoveredMs} ms`);
    expect(samples.length).toBeGreaterThan(0);
    expect(samples.filter((s) => s.phase !== 'Running' || s.booted !== 'True' || !s.cpus)).toEqual([]);
    expect((await eventCounts()).Started).toBe(startedBefore);
    expect(managers.map((m) => m.alive())).toEqual([true, true]);
  });

  it('a manager killed: it is restarted, and the other replica keeps reconciling meanwhile', async () => {
    const victim = managers[0]!;
    const old = victim.ref;
    kill(old);
    const killedAt = Date.now();
    const before = await vms.getVm(VM);
    await vms.patchVm(VM, { powerdownTimeout: 61 });
    // Bound: the surviving replica takes the key (a held one within KEY_LOCK, 4.5 s).
    const reconciledMs = await recoveredAfter(killedAt, 10_000, async () => {
      const vm = await vms.getVm(VM);
      expect(vm.status?.observedGeneration).toBe(before.metadata.generation + 1);
    });
    // Bound: the supervisor's first back-off (1 s) and a manager's start.
    const restartedMs = await recoveredAfter(killedAt, 20_000, async () => {
      expect(victim.ref).not.toEqual(old);
      expect(victim.alive()).toBe(true);
    });
    const logOf = async (replica: number) =>
      parseManagerLog(await readFile(bed.state().managers[replica]!.log, 'utf8'));
    const replacementStarted = await eventually(async () => {
      const at = startedAfter(await logOf(0), killedAt);
      expect(at).toBeDefined();
      return at!;
    }, 20_000);
    console.log(
      `manager SIGKILL: change reconciled after ${reconciledMs} ms, manager restarted after ${restartedMs} ms, ` +
        `ready after ${replacementStarted - killedAt} ms`,
    );
    // The survivor did it, before the replacement was up.
    const survivorWrote = firstWrite(await logOf(1), KEY, 'ConfigMap', killedAt);
    expect(survivorWrote).toBeDefined();
    expect(survivorWrote!).toBeLessThan(replacementStarted);
    expect(isRunning(old)).toBe(false);
  });

  it('kube-apiserver killed: it comes back, managers catch up without a storm of warnings', async () => {
    const apiserver = processOf((state) => state.controlPlane.find((p) => p.name === 'kube-apiserver')!);
    const managersBefore = managers.map((m) => m.ref);
    const logs = bed.state().managers.map((m) => m.log);
    const logOffsets = await Promise.all(logs.map(async (log) => (await readFile(log, 'utf8')).length));
    const old = apiserver.ref;
    const killedAt = Date.now();
    kill(old);
    const backMs = await recoveredAfter(killedAt, 120_000, async () => {
      expect(apiserver.ref).not.toEqual(old);
      await vms.kubectl(['get', '--raw', '/readyz']);
    });
    const before = await vms.getVm(VM);
    const changedAt = Date.now();
    await vms.patchVm(VM, { powerdownTimeout: 62 });
    // Bound: watches restart with back-off capped at 10 s.
    const reconciledMs = await recoveredAfter(changedAt, 60_000, async () => {
      const vm = await vms.getVm(VM);
      expect(vm.status?.observedGeneration).toBe(before.metadata.generation + 1);
      expect(isBooted(vm)).toBe(true);
    });
    console.log(
      `kube-apiserver SIGKILL: back after ${backMs} ms, a change reconciled ${reconciledMs} ms after that`,
    );
    for (const [i, log] of logs.entries()) {
      const lines = (await readFile(log, 'utf8')).slice(logOffsets[i]).split('\n');
      const warnings = lines.filter((line) => line.includes('watch failed; restarting it')).length;
      const restored = lines.filter((line) => line.includes('watch restored')).length;
      console.log(`manager-${i + 1}: ${warnings} watch-failure warnings, ${restored} watches restored`);
      // One warning per watch (one per watched kind) per outage; the restarted manager (previous
      // test) may have had none.
      expect(warnings).toBeLessThanOrEqual(WATCHED.length);
    }
    expect(managers.map((m) => m.ref)).toEqual(managersBefore); // no manager crashed
  });

  it('the runner killed: status says Failed at once, counts the restart, and the VM boots again', async () => {
    const runner = await runnerProcess();
    const qemu = await guestQemu();
    const restartsBefore = (await vms.getVm(VM)).status?.runnerRestarts ?? 0;
    const killedAt = Date.now();
    kill(runner);
    // Bound: kubelet's next pod status update (PLEG relists every second).
    const failedMs = await recoveredAfter(killedAt, 60_000, async () => {
      const vm = await vms.getVm(VM);
      expect(vm.status).toMatchObject({ phase: 'Failed', cpus: 0, ram: '0' });
      expect(condition(vm, 'Booted')?.status).toBe('False');
      expect(condition(vm, 'Running')?.message).toContain('killed by signal 9');
    });
    // qemu dies with its runner (parent-death signal): no orphan.
    await eventually(async () => expect(isRunning(qemu)).toBe(false), 10_000);
    const bootedMs = await recoveredAfter(killedAt, BOOT_BOUND_MS, async () => {
      expect(isBooted(await vms.getVm(VM))).toBe(true);
    });
    console.log(`runner SIGKILL: Failed in status after ${failedMs} ms, booted again after ${bootedMs} ms`);
    const vm = await vms.getVm(VM);
    expect(vm.status?.runnerRestarts).toBe(restartsBefore + 1);
    expect((await eventCounts()).RunnerRestarted).toBe(vm.status?.runnerRestarts);
  });

  it('qemu killed: Failed with a clean message and no CPUs, the restart counted, and the VM boots again', async () => {
    const qemu = await guestQemu();
    const restartsBefore = (await vms.getVm(VM)).status?.runnerRestarts ?? 0;
    const killedAt = Date.now();
    kill(qemu);
    const failedMs = await recoveredAfter(killedAt, 60_000, async () => {
      const vm = await vms.getVm(VM);
      expect(vm.status).toMatchObject({ phase: 'Failed', cpus: 0, ram: '0' });
      const message = condition(vm, 'Running')?.message ?? '';
      expect(message).toContain('qemu killed by SIGKILL without an orderly shutdown');
      expect(message).not.toMatch(/:\s*(\)|;|$)/); // no dangling colon where qemu said nothing
    });
    const bootedMs = await recoveredAfter(killedAt, BOOT_BOUND_MS, async () => {
      expect(isBooted(await vms.getVm(VM))).toBe(true);
    });
    console.log(`qemu SIGKILL: Failed in status after ${failedMs} ms, booted again after ${bootedMs} ms`);
    const vm = await vms.getVm(VM);
    expect(vm.status?.runnerRestarts).toBe(restartsBefore + 1);
    const counts = await eventCounts();
    expect(counts.RunnerRestarted).toBe(vm.status?.runnerRestarts);
    expect(counts.Failed).toBe(2); // one per failure, the runner's and qemu's
  });
});
