import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import type { RunnerSnapshot } from '../../../src/api/runner-snapshot.js';
import {
  VirtualMachine,
  type RunPolicy,
  type VirtualMachineStatus,
} from '../../../src/api/virtual-machine.js';
import { OPERATION_ANNOTATION } from '../../../src/reconcilers/virtual-machine/naming.js';
import { afterQemuEnds, policyStop } from '../../../src/reconcilers/virtual-machine/lifecycle/run-policy.js';

const seed = parse(readFileSync('examples/local-path-test-vm.yaml', 'utf8'));
const runningStatus: VirtualMachineStatus = {
  phase: 'Running',
  observedGeneration: 2,
  runner: { runId: 'run-1', seq: 3, podUid: 'pod-1' },
  runnerRestarts: 0,
};

function vm(runPolicy: RunPolicy | undefined, extra: Record<string, unknown> = {}, annotations = {}) {
  return VirtualMachine.parse({
    ...seed,
    metadata: { ...seed.metadata, generation: 2, annotations },
    spec: {
      ...seed.spec,
      ...(runPolicy && { runPolicy }),
      ...extra,
      vm: { ...seed.spec.vm, state: 'Running' },
    },
    status: runningStatus,
  });
}

const pod = (uid = 'pod-1', restartCount = 0) => ({
  metadata: { name: 'test-vm-0', uid },
  status: { containerStatuses: [{ name: 'runner', restartCount, state: { running: {} } }] },
});
const guestOff = {
  phase: 'stopped',
  lastShutdown: { guest: true, reason: 'guest-shutdown', at: 't' },
} as RunnerSnapshot;
const failed: VirtualMachineStatus = {
  phase: 'Failed',
  conditions: [
    {
      type: 'Running',
      status: 'False',
      reason: 'RunnerFailed',
      message: 'qemu was killed by signal 9',
      lastTransitionTime: 't',
    },
  ],
};

describe('run policies', () => {
  it.each([
    [undefined, {}, 'restart', 'restart'],
    [undefined, { guestShutdownStops: true }, 'waitForStop', 'restart'],
    ['AlwaysOn', {}, 'restart', 'restart'],
    ['AlwaysOnUnlessStoppedManually', {}, 'waitForStop', 'restart'],
    ['Manual', {}, 'waitForStop', 'waitForStop'],
  ] as const)(
    '%s %o: the runner %s after a guest power-off and %s after a failure',
    (policy, extra, off, fail) => {
      expect(afterQemuEnds(vm(policy, extra))).toEqual({
        whenGuestPowersOff: off,
        whenQemuFails: fail,
        whenStartFails: 'waitForRetry',
      });
    },
  );

  it('a guest power-off stops the VM under AlwaysOnUnlessStoppedManually and Manual, not under AlwaysOn', () => {
    const facts = { pod: pod() as never, snapshot: guestOff, status: runningStatus };
    expect(policyStop(vm('AlwaysOnUnlessStoppedManually'), facts)?.reason).toBe('StoppedByGuest');
    expect(policyStop(vm('Manual'), facts)?.reason).toBe('StoppedByGuest');
    expect(policyStop(vm('AlwaysOn'), facts)).toBeUndefined();
    expect(policyStop(vm(undefined), facts)).toBeUndefined();
    expect(policyStop(vm(undefined, { guestShutdownStops: true }), facts)?.reason).toBe('StoppedByGuest');
  });

  it('a power-off that answers a stop request (the runner pod deleted) is not the guest powering off', () => {
    const answered = { ...guestOff, stopRequested: true };
    const facts = { pod: pod() as never, snapshot: answered, status: runningStatus };
    expect(policyStop(vm('AlwaysOnUnlessStoppedManually'), facts)).toBeUndefined();
  });

  it("a started VM is not stopped again by the power-off of its earlier run's pod, on its way out", () => {
    const leaving = { ...pod(), metadata: { ...pod().metadata, deletionTimestamp: new Date() } };
    const facts = { pod: leaving as never, snapshot: guestOff, status: runningStatus };
    // The Start operation holds the VM meanwhile (so the pod's going is not a lost runner either).
    const starting = vm('Manual', {}, { [OPERATION_ANNOTATION]: 'vm-start-x' });
    expect(policyStop(starting, facts)).toBeUndefined();
    expect(policyStop(vm('AlwaysOnUnlessStoppedManually'), facts)).toBeUndefined();
  });

  it('a host-side stop is not the guest powering off', () => {
    const hostStop = { ...guestOff, lastShutdown: { guest: false, reason: 'host-signal', at: 't' } };
    expect(
      policyStop(vm('Manual'), { pod: pod() as never, snapshot: hostStop, status: runningStatus }),
    ).toBeUndefined();
  });

  it('a failure stops the VM only under Manual, with the failure in the message', () => {
    const facts = { pod: pod() as never, status: failed };
    expect(policyStop(vm('Manual'), facts)).toEqual({
      reason: 'StoppedAfterFailure',
      message: 'qemu was killed by signal 9; runPolicy Manual keeps the VM off',
    });
    for (const policy of ['AlwaysOn', 'AlwaysOnUnlessStoppedManually', undefined] as const) {
      expect(policyStop(vm(policy), facts)).toBeUndefined();
    }
  });

  it('Manual: a runner pod that went away, is deleted or whose container restarted stops the VM', () => {
    const status = runningStatus;
    expect(policyStop(vm('Manual'), { status })?.message).toMatch(/^the runner pod went away/);
    expect(policyStop(vm('Manual'), { pod: pod('pod-2') as never, status })?.reason).toBe('RunnerLost');
    const deleting = { ...pod(), metadata: { ...pod().metadata, deletionTimestamp: 'now' } };
    expect(policyStop(vm('Manual'), { pod: deleting as never, status })?.reason).toBe('RunnerLost');
    expect(policyStop(vm('Manual'), { pod: pod('pod-1', 1) as never, status })?.message).toMatch(/restarted/);
    expect(policyStop(vm('Manual'), { pod: pod() as never, status })).toBeUndefined();
    expect(policyStop(vm('AlwaysOnUnlessStoppedManually'), { status })).toBeUndefined();
  });

  it('Manual: a pod ended by an operation, or after a spec change, is not lost', () => {
    const byOperation = vm('Manual', {}, { [OPERATION_ANNOTATION]: 'restart-1' });
    expect(policyStop(byOperation, { status: runningStatus })).toBeUndefined();
    const edited = vm('Manual');
    edited.metadata.generation = 3;
    expect(policyStop(edited, { status: runningStatus })).toBeUndefined();
  });
});
