import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { formatBytes } from '../../../src/api/runner-config.js';
import type { RunnerSnapshot } from '../../../src/api/runner-snapshot.js';
import { VirtualMachine, type VirtualMachineStatus } from '../../../src/api/virtual-machine.js';
import { deriveStatus, transitionEvents } from '../../../src/reconcilers/virtual-machine/status/derive.js';

const now = new Date('2026-01-01T00:00:00Z');
const seed = parse(readFileSync('examples/local-path-test-vm.yaml', 'utf8'));
const vmWith = (spec: Record<string, unknown> = {}, status?: VirtualMachineStatus) =>
  VirtualMachine.parse({
    ...seed,
    metadata: { ...seed.metadata, uid: 'vm-uid', generation: 2 },
    spec: { ...seed.spec, ...spec, vm: { ...seed.spec.vm, ...(spec.vm as object) } },
    ...(status && { status }),
  });
const runningPod = {
  metadata: { name: 'test-vm-0', uid: 'pod-uid' },
  spec: { nodeName: 'node-1', containers: [] },
  status: { phase: 'Running' },
};

function snapshot(overrides: Partial<RunnerSnapshot> = {}): RunnerSnapshot {
  return {
    seq: 5,
    runId: 'run-1',
    pod: 'test-vm-0',
    podUid: 'pod-uid',
    phase: 'running',
    cpus: 2,
    ram: 4 * 2 ** 30,
    drives: {},
    booted: true,
    updatedAt: now.toISOString(),
    ...overrides,
  };
}

describe('folding the runner snapshot into status', () => {
  it('reports a booted guest as Running with its CPUs and RAM', () => {
    const status = deriveStatus(vmWith(), {
      pod: runningPod as never,
      snapshot: snapshot(),
      specErrors: [],
      now,
    });
    expect(status).toMatchObject({
      phase: 'Running',
      cpus: 2,
      ram: '4Gi',
      node: 'node-1',
      runner: { runId: 'run-1', seq: 5 },
    });
    const byType = Object.fromEntries(status.conditions!.map((c) => [c.type, c]));
    expect(byType.Running).toMatchObject({ status: 'True', reason: 'GuestRunning' });
    expect(byType.Booted).toMatchObject({ status: 'True', reason: 'GuestBooted' });
  });

  it("a qemu stopped by a host signal: the Running condition and lastShutdown say who, in qemu's words", () => {
    const qemuSays = 'qemu-system-x86_64: terminating on signal 15';
    const status = deriveStatus(vmWith(), {
      pod: runningPod as never,
      snapshot: snapshot({
        phase: 'stopped',
        booted: false,
        lastShutdown: { guest: false, reason: 'host-signal', at: 't', qemuSays },
      }),
      specErrors: [],
      now,
    });
    expect(status.lastShutdown).toMatchObject({ reason: 'host-signal', qemuSays });
    expect(status.conditions?.find((c) => c.type === 'Running')).toMatchObject({
      reason: 'Restarting',
      message: `qemu stopped (host-signal: ${qemuSays}); the runner restarts`,
    });
  });

  it('says Running but not Booted while the guest boots', () => {
    const status = deriveStatus(vmWith(), {
      pod: runningPod as never,
      snapshot: snapshot({ phase: 'booting', booted: false }),
      specErrors: [],
      now,
    });
    expect(status.phase).toBe('Running');
    expect(status.conditions?.find((c) => c.type === 'Booted')?.status).toBe('False');
  });

  it('the guest agent: AgentConnected, osinfo and the addresses; Booted without the vmop agent', () => {
    const osinfo = { id: 'debian', 'pretty-name': 'Debian GNU/Linux 12' };
    const status = deriveStatus(vmWith(), {
      pod: runningPod as never,
      snapshot: snapshot({
        phase: 'booting',
        booted: false,
        guestAgent: { connected: true, osinfo, addresses: ['10.0.2.15', 'fd00::5'] },
      }),
      specErrors: [],
      now,
    });
    expect(status).toMatchObject({ phase: 'Running', osinfo, ipAddresses: ['10.0.2.15', 'fd00::5'] });
    const byType = Object.fromEntries(status.conditions!.map((c) => [c.type, c]));
    expect(byType.AgentConnected).toMatchObject({ status: 'True', reason: 'AgentConnected' });
    expect(byType.Booted).toMatchObject({ status: 'True', message: 'the guest agent answers' });

    const gone = deriveStatus(vmWith(), {
      pod: runningPod as never,
      snapshot: snapshot({ guestAgent: { connected: false, osinfo } }),
      specErrors: [],
      now,
    });
    expect(gone.ipAddresses).toBeUndefined();
    expect(gone.conditions?.find((c) => c.type === 'AgentConnected')?.status).toBe('False');
  });

  it("a VM with an address of its own never shows its guest's: a claim that does not exist leaves none", () => {
    const guestSays = snapshot({
      phase: 'running',
      booted: true,
      guestAgent: { connected: true, addresses: ['10.66.10.196'] },
    });
    const seen = { pod: runningPod as never, snapshot: guestSays, specErrors: [], now };
    const claimed = deriveStatus(vmWith(), { ...seen, ipAddress: { name: 'gone' } });
    expect(claimed.ipAddress).toBeUndefined();
    expect(claimed.virtualMachineIPAddressName).toBe('gone');
    expect(claimed.ipAddresses).toEqual(['10.66.10.196']);
    const leased = deriveStatus(vmWith(), { ...seen, ipAddress: { name: 'mine', address: '10.66.10.171' } });
    expect(leased.ipAddress).toBe('10.66.10.171');
    // Without an address of its own, the guest's first address is the VM's, as before.
    expect(deriveStatus(vmWith(), seen).ipAddress).toBe('10.66.10.196');
  });

  it('ignores a snapshot of another pod (a previous incarnation with the same name)', () => {
    const status = deriveStatus(vmWith(), {
      pod: runningPod as never,
      snapshot: snapshot({ podUid: 'old-pod-uid', cpus: 7 }),
      specErrors: [],
      now,
    });
    expect(status.phase).toBe('Starting');
    expect(status.cpus).toBeUndefined();
  });

  it('ignores a snapshot older than the one already folded in', () => {
    const vm = vmWith({}, { phase: 'Running', runner: { runId: 'run-1', seq: 9 } });
    const status = deriveStatus(vm, {
      pod: runningPod as never,
      snapshot: snapshot({ seq: 5, cpus: 7 }),
      specErrors: [],
      now,
    });
    expect(status.cpus).toBeUndefined();
  });

  it('keeps the last shutdown after the next run starts, and reports a stopped VM with no CPUs', () => {
    const shutdown = { guest: true, reason: 'guest-shutdown', at: '2026-01-01T00:00:00Z' };
    const stopped = deriveStatus(vmWith({ vm: { state: 'Stopped' } }), { specErrors: [], now });
    expect(stopped).toMatchObject({ phase: 'Stopped', cpus: 0, ram: '0' });
    const afterShutdown = deriveStatus(vmWith(), {
      pod: runningPod as never,
      snapshot: snapshot({ phase: 'stopped', lastShutdown: shutdown }),
      specErrors: [],
      now,
    });
    expect(afterShutdown.lastShutdown).toEqual({
      guestInitiated: true,
      reason: 'guest-shutdown',
      time: shutdown.at,
    });
    const nextRun = deriveStatus(vmWith({}, afterShutdown), {
      pod: runningPod as never,
      snapshot: snapshot({ runId: 'run-2', seq: 1 }),
      specErrors: [],
      now,
    });
    expect(nextRun.lastShutdown).toEqual(afterShutdown.lastShutdown);
  });

  it("a runner's last words after its pod is gone say how the guest stopped; another run's do not", () => {
    const stopping = vmWith(
      { vm: { state: 'Stopped' } },
      { phase: 'Stopping', runner: { runId: 'run-1', seq: 5, podUid: 'pod-uid' } },
    );
    const lastShutdown = { guest: true, reason: 'guest-shutdown', at: '2026-01-01T00:00:00Z' };
    const stopped = deriveStatus(stopping, {
      snapshot: snapshot({ seq: 6, phase: 'stopped', stopRequested: true, lastShutdown }),
      specErrors: [],
      now,
    });
    expect(stopped).toMatchObject({
      phase: 'Stopped',
      lastShutdown: {
        guestInitiated: true,
        reason: 'guest-shutdown',
        time: lastShutdown.at,
        requested: true,
      },
    });
    // A snapshot of another run (or one already folded in) says nothing of this stop.
    for (const other of [
      snapshot({ seq: 6, runId: 'run-0', lastShutdown }),
      snapshot({ seq: 5, lastShutdown }),
    ])
      expect(deriveStatus(stopping, { snapshot: other, specErrors: [], now }).lastShutdown).toBeUndefined();
  });

  const containerStarted = '2026-01-01T00:00:00Z';
  const podWith = (container: Record<string, unknown>) => ({
    ...runningPod,
    status: { phase: 'Running', containerStatuses: [{ name: 'runner', restartCount: 0, ...container }] },
  });
  const runningContainer = { state: { running: { startedAt: containerStarted } } };
  const foldedRunning = (restarts = 0): VirtualMachineStatus =>
    deriveStatus(vmWith(), {
      pod: podWith({ ...runningContainer, restartCount: restarts }) as never,
      snapshot: snapshot({ startedAt: '2026-01-01T00:00:01Z' }),
      specErrors: [],
      now,
    });
  const byType = (status: VirtualMachineStatus) =>
    Object.fromEntries(status.conditions!.map((c) => [c.type, c]));

  it('keeps the last known state when the snapshot is gone but the runner still runs (Redis came back empty)', () => {
    const before = foldedRunning();
    expect(byType(before).RunnerReporting).toMatchObject({ status: 'True' });
    const after = deriveStatus(vmWith({}, before), {
      pod: podWith(runningContainer) as never,
      specErrors: [],
      now: new Date('2026-01-01T00:05:00Z'),
    });
    expect(after).toMatchObject({ phase: 'Running', cpus: 2, ram: '4Gi', runner: before.runner });
    expect(byType(after).Booted).toMatchObject({ status: 'True' });
    expect(byType(after).RunnerReporting).toMatchObject({ status: 'False', reason: 'NotReporting' });
    expect(transitionEvents(before, after, 'Running')).toEqual([]);
  });

  it('does not keep it once the container restarted: that runner has not reported yet', () => {
    const after = deriveStatus(vmWith({}, foldedRunning()), {
      pod: podWith({ ...runningContainer, restartCount: 1 }) as never,
      specErrors: [],
      now,
    });
    expect(after.phase).toBe('Starting');
    expect(byType(after).Booted).toMatchObject({ status: 'False' });
  });

  it("follows the runner container's state, not the last snapshot, when the runner was killed", () => {
    const before = foldedRunning();
    const killed = podWith({
      restartCount: 1,
      state: { waiting: { reason: 'CrashLoopBackOff', message: 'back-off 10s restarting failed container' } },
      lastState: { terminated: { exitCode: 137, reason: 'Error' } },
    });
    const after = deriveStatus(vmWith({}, before), {
      pod: killed as never,
      snapshot: snapshot({ startedAt: '2026-01-01T00:00:01Z' }),
      specErrors: [],
      now,
    });
    expect(after).toMatchObject({ phase: 'Failed', cpus: 0, ram: '0', runnerRestarts: 1 });
    expect(byType(after).Running).toMatchObject({ reason: 'CrashLoopBackOff' });
    expect(byType(after).Running?.message).toContain('killed by signal 9');
    expect(byType(after).Booted).toMatchObject({ status: 'False' });
    expect(transitionEvents(before, after, 'Running')).toEqual([
      expect.objectContaining({ type: 'Warning', reason: 'Failed' }),
      expect.objectContaining({ type: 'Warning', reason: 'RunnerRestarted', count: 1 }),
    ]);
  });

  it("ignores the snapshot of the container's previous run after a restart", () => {
    const after = deriveStatus(vmWith(), {
      pod: podWith({ state: { running: { startedAt: '2026-01-01T00:01:00Z' } }, restartCount: 1 }) as never,
      snapshot: snapshot({ startedAt: '2026-01-01T00:00:01Z' }),
      specErrors: [],
      now,
    });
    expect(after.phase).toBe('Starting');
    expect(after.runner).toBeUndefined();
  });

  it('takes the snapshot of a runner that started just before its container was noted as started', () => {
    // The process at …:59.990, containerd's note of the start after it, reported as 00:01:00.
    const after = deriveStatus(vmWith(), {
      pod: podWith({ state: { running: { startedAt: '2026-01-01T00:01:00Z' } } }) as never,
      snapshot: snapshot({ startedAt: '2026-01-01T00:00:59.990Z' }),
      specErrors: [],
      now,
    });
    expect(after.phase).toBe('Running');
    expect(after.runner).toBeDefined();
  });

  it('reports a failed VM without the CPUs and RAM of the dead qemu', () => {
    const status = deriveStatus(vmWith(), {
      pod: runningPod as never,
      snapshot: snapshot({ phase: 'failed', message: 'qemu killed by SIGKILL' }),
      specErrors: [],
      now,
    });
    expect(status).toMatchObject({ phase: 'Failed', cpus: 0, ram: '0' });
  });

  it("names the VM's field when the runner found a missing CD image, for that config only", () => {
    const failed = snapshot({
      phase: 'failed',
      config: 'digest-1',
      message: 'CD image /images/x.iso does not exist',
      configError: { field: 'vm.drives[1].file', message: 'CD image /images/x.iso does not exist' },
    });
    const observed = { pod: runningPod as never, snapshot: failed, specErrors: [], now };
    const status = deriveStatus(vmWith(), { ...observed, configDigest: 'digest-1' });
    expect(byType(status).SpecValid).toMatchObject({
      status: 'False',
      reason: 'RunnerRejectedSpec',
      message: 'spec.vm.disks[1].cdrom.image: CD image /images/x.iso does not exist',
    });
    const edited = deriveStatus(vmWith(), { ...observed, configDigest: 'digest-2' });
    expect(byType(edited).SpecValid).toMatchObject({ status: 'True' });
  });

  it("reports the apiserver's refusal of an owned object in SpecValid", () => {
    const status = deriveStatus(vmWith(), { specErrors: [], rejected: 'StatefulSet "x" is invalid', now });
    expect(byType(status).SpecValid).toMatchObject({ status: 'False', reason: 'RejectedByApiserver' });
    expect(byType(status).SpecValid?.message).toContain('StatefulSet "x" is invalid');
  });

  it("passes on kubelet's and the scheduler's reasons when the runner pod cannot start", () => {
    const unschedulable = {
      metadata: { name: 'test-vm-0', uid: 'pod-uid' },
      spec: {},
      status: {
        phase: 'Pending',
        conditions: [
          {
            type: 'PodScheduled',
            status: 'False',
            reason: 'Unschedulable',
            message: '0/1 nodes are available: 1 Insufficient cpu.',
          },
        ],
      },
    };
    const pending = deriveStatus(vmWith(), { pod: unschedulable as never, specErrors: [], now });
    expect(byType(pending).Running).toMatchObject({
      reason: 'PodUnscheduled',
      message: 'the runner pod cannot be scheduled: 0/1 nodes are available: 1 Insufficient cpu.',
    });
    const pulling = podWith({ state: { waiting: { reason: 'ErrImagePull', message: 'not found' } } });
    const status = deriveStatus(vmWith(), {
      pod: { ...pulling, status: { ...pulling.status, phase: 'Pending' } } as never,
      specErrors: [],
      now,
    });
    expect(status.phase).toBe('Starting');
    expect(byType(status).Running).toMatchObject({
      reason: 'ErrImagePull',
      message: 'the runner container cannot start: not found',
    });
  });

  it('a runner pod not made yet says what it waits for (its claims, its imports)', () => {
    const waiting = {
      reason: 'WaitingForVolumeBinding',
      message: 'the runner pod waits for its claims to be bound: vm-runner-data (it is being made)',
    };
    const status = deriveStatus(vmWith(), { specErrors: [], waiting, now });
    expect(status.phase).toBe('Pending');
    expect(byType(status).Running).toMatchObject({ status: 'False', ...waiting });
    const stopped = deriveStatus(vmWith({ vm: { ...seed.spec.vm, state: 'Stopped' } }), {
      specErrors: [],
      waiting,
      now,
    });
    expect(stopped.phase).toBe('Stopped');
  });

  it.each([
    [
      'PvcNotFound',
      '0/1 nodes are available: persistentvolumeclaim "disk-test-vm-0" not found. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.',
    ],
    [
      'WaitingForVolumeBinding',
      '0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.',
    ],
    [
      'WaitingForVolumeBinding',
      "0/1 nodes are available: 1 node(s) didn't find available persistent volumes to bind.",
    ],
    ['PodUnscheduled', "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."],
  ])('reason %s for the scheduler saying "%s"', (reason, message) => {
    const pod = {
      metadata: { name: 'test-vm-0', uid: 'pod-uid' },
      spec: {},
      status: {
        phase: 'Pending',
        conditions: [{ type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message }],
      },
    };
    const status = deriveStatus(vmWith(), { pod: pod as never, specErrors: [], now });
    expect(status.phase).toBe('Pending');
    expect(byType(status).Running).toMatchObject({
      reason,
      message: `the runner pod cannot be scheduled: ${message}`,
    });
  });

  it('formats RAM in the largest binary unit that divides it', () => {
    expect(formatBytes(4 * 2 ** 30)).toBe('4Gi');
    expect(formatBytes(160 * 2 ** 20)).toBe('160Mi');
    expect(formatBytes(1000)).toBe('1000');
  });
});

describe('transition events', () => {
  const running: VirtualMachineStatus = { phase: 'Running', node: 'node-1' };
  const stoppedAfter = (guestInitiated: boolean, time = 't1') => ({
    phase: 'Stopped' as const,
    lastShutdown: { guestInitiated, reason: guestInitiated ? 'guest-shutdown' : 'host-qmp-quit', time },
  });

  it('announces a start once', () => {
    expect(transitionEvents({ phase: 'Starting' }, running, 'Running')).toEqual([
      { type: 'Normal', reason: 'Started', message: 'the VM runs on node-1' },
    ]);
    expect(transitionEvents(running, running, 'Running')).toEqual([]);
  });

  it('tells a stop on request from a guest power-off and a host-side stop', () => {
    expect(transitionEvents(running, stoppedAfter(true), 'Stopped').map((e) => e.reason)).toEqual([
      'StoppedByRequest',
    ]);
    expect(transitionEvents(running, stoppedAfter(true), 'Running').map((e) => e.reason)).toEqual([
      'StoppedByGuest',
    ]);
    expect(transitionEvents(running, stoppedAfter(false), 'Running')[0]).toMatchObject({
      type: 'Warning',
      reason: 'StoppedByHost',
    });
    expect(transitionEvents(stoppedAfter(true), stoppedAfter(true), 'Running')).toEqual([]);
    expect(
      transitionEvents({ phase: 'Stopping' }, { phase: 'Stopped' }, 'Stopped').map((e) => e.reason),
    ).toEqual(['Stopped']);
  });

  it("says who stopped qemu with a signal, in qemu's own words", () => {
    const qemuSays = 'qemu-system-x86_64: terminating on signal 15 from pid 4242 (kill)';
    const signalled = {
      phase: 'Starting' as const,
      lastShutdown: { guestInitiated: false, reason: 'host-signal', time: 't2', qemuSays },
    };
    expect(transitionEvents(running, signalled, 'Running')).toContainEqual({
      type: 'Warning',
      reason: 'StoppedByHost',
      message: `qemu stopped (host-signal: ${qemuSays})`,
    });
  });

  it('warns about a failure', () => {
    expect(transitionEvents(running, { phase: 'Failed' }, 'Running')[0]).toMatchObject({
      type: 'Warning',
      reason: 'Failed',
    });
  });
});
