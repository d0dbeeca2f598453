import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import type { OperationType, VirtualMachineOperation } from '../../../src/api/virtual-machine-operation.js';
import {
  VirtualMachine,
  type RunPolicy,
  type VirtualMachineStatus,
  type VmPhase,
} from '../../../src/api/virtual-machine.js';
import {
  completion,
  refusal,
  signalFor,
  supersedes,
} from '../../../src/reconcilers/virtual-machine-operation/operations.js';
import { stopGraceSeconds } from '../../../src/reconcilers/virtual-machine/runner-pod/pod.js';

const seed = parse(readFileSync('examples/local-path-test-vm.yaml', 'utf8'));

function vm(
  state: 'Running' | 'Stopped',
  phase: VmPhase,
  runPolicy?: RunPolicy,
  status: VirtualMachineStatus = {},
) {
  return VirtualMachine.parse({
    ...seed,
    spec: { ...seed.spec, ...(runPolicy && { runPolicy }), vm: { ...seed.spec.vm, state } },
    status: { phase, ...status },
  });
}

function op(
  type: OperationType,
  force?: boolean,
  status?: VirtualMachineOperation['status'],
): VirtualMachineOperation {
  return {
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachineOperation',
    metadata: { name: `op-${type.toLowerCase()}`, namespace: 'default' },
    spec: { virtualMachineName: 'test-vm', type, ...(force !== undefined && { force }) },
    ...(status && { status }),
  };
}

describe('operation applicability', () => {
  it.each([
    ['Start', 'AlwaysOn'],
    ['Stop', 'AlwaysOn'],
    ['Start', 'AlwaysOff'],
    ['Restart', 'AlwaysOff'],
    ['Reset', 'AlwaysOff'],
    ['Evict', 'AlwaysOff'],
  ] as const)('refuses %s under runPolicy %s, naming the policy', (type, policy) => {
    const state = policy === 'AlwaysOff' ? 'Stopped' : 'Running';
    expect(refusal(op(type), vm(state, 'Running', policy))).toEqual({
      reason: 'NotApplicableForVirtualMachineRunPolicy',
      message: `${type} is not applicable to a VM with runPolicy ${policy}`,
    });
  });

  it('refuses what the VM is not in the state for, saying its phase', () => {
    expect(refusal(op('Start'), vm('Running', 'Running'))).toMatchObject({
      reason: 'NotApplicableForVirtualMachinePhase',
      message: 'the VM is Running (spec.vm.state Running): it runs already',
    });
    expect(refusal(op('Stop'), vm('Stopped', 'Stopped'))?.reason).toBe('NotApplicableForVirtualMachinePhase');
    expect(refusal(op('Restart'), vm('Stopped', 'Stopped'))?.reason).toBe(
      'NotApplicableForVirtualMachinePhase',
    );
    expect(refusal(op('Reset'), vm('Running', 'Starting'))?.reason).toBe(
      'NotApplicableForVirtualMachinePhase',
    );
    expect(refusal(op('Restart'), vm('Running', 'Stopping'))?.message).toMatch(/force restarts it at once/);
  });

  it('allows what makes sense', () => {
    expect(refusal(op('Start'), vm('Stopped', 'Stopped', 'Manual'))).toBeUndefined();
    expect(refusal(op('Start'), vm('Running', 'Failed'))).toBeUndefined(); // a fresh start
    expect(refusal(op('Stop'), vm('Running', 'Running', 'AlwaysOnUnlessStoppedManually'))).toBeUndefined();
    expect(refusal(op('Stop', true), vm('Stopped', 'Stopping'))).toBeUndefined();
    expect(refusal(op('Restart'), vm('Running', 'Running', 'AlwaysOn'))).toBeUndefined();
    expect(refusal(op('Reset'), vm('Running', 'Running'))).toBeUndefined();
    expect(refusal(op('Evict'), vm('Running', 'Running'))).toBeUndefined();
  });
});

describe('superseding', () => {
  it("follows Deckhouse's matrix", () => {
    expect(supersedes(op('Start'), op('Stop'))).toBe(true);
    expect(supersedes(op('Stop'), op('Stop', true))).toBe(true);
    expect(supersedes(op('Restart'), op('Stop', true))).toBe(true);
    expect(supersedes(op('Evict'), op('Restart'))).toBe(true);
    expect(supersedes(op('Stop'), op('Start'))).toBe(false);
    expect(supersedes(op('Stop', true), op('Restart', true))).toBe(false);
    expect(supersedes(op('Restart'), op('Restart'))).toBe(false);
    expect(supersedes(op('Reset'), op('Stop', true))).toBe(false);
  });
});

describe('signals', () => {
  it('rewrites the state, ends the pod or asks for a reset', () => {
    expect(signalFor(op('Start'), vm('Stopped', 'Stopped'))).toEqual({ state: 'Running' });
    expect(signalFor(op('Start'), vm('Running', 'Failed'))).toEqual({ deletePod: {} });
    expect(signalFor(op('Stop'), vm('Running', 'Running'))).toEqual({ state: 'Stopped' });
    expect(signalFor(op('Stop', true), vm('Running', 'Running'))).toEqual({
      state: 'Stopped',
      deletePod: { gracePeriodSeconds: 1 },
    });
    expect(signalFor(op('Restart'), vm('Running', 'Running'))).toEqual({ deletePod: {} });
    expect(signalFor(op('Reset'), vm('Running', 'Running'))).toEqual({ reset: true });
    expect(signalFor(op('Evict'), vm('Running', 'Running'))).toEqual({ evictPod: true });
  });

  it("a forced stop's pod goes in a second also when the VM's reconciler deletes it first", () => {
    // Kubelet keeps the grace period of the first deletion it acts on: the VM's reconciler, seeing
    // state Stopped, must not give the pod powerdownTimeout before the operation's own deletion.
    const stopping = vm('Stopped', 'Running');
    const graceful = stopping.spec.vm.powerdownTimeout + 5;
    expect(stopGraceSeconds(stopping, undefined)).toBe(graceful);
    expect(stopGraceSeconds(stopping, op('Stop'))).toBe(graceful);
    expect(stopGraceSeconds(stopping, op('Stop', true))).toBe(1);
    expect(stopGraceSeconds(stopping, op('Restart', true))).toBe(1);
    expect(stopGraceSeconds(stopping, op('Reset', true))).toBe(graceful);
  });
});

describe('completion, read from the VM status', () => {
  const signalled = {
    phase: 'InProgress' as const,
    signalledAt: '2026-01-01T00:00:00.000Z',
    podUid: 'old-pod',
  };

  it('a Restart completes only when a new runner pod runs the VM', () => {
    const restart = op('Restart', false, signalled);
    const oldRunner = { runner: { runId: 'a', seq: 1, podUid: 'old-pod' } };
    expect(completion(restart, vm('Running', 'Running', undefined, oldRunner))).toBeUndefined();
    const newRunner = { runner: { runId: 'b', seq: 1, podUid: 'new-pod' } };
    expect(completion(restart, vm('Running', 'Starting', undefined, newRunner))).toBeUndefined();
    expect(completion(restart, vm('Running', 'Running', undefined, newRunner))?.reason).toBe(
      'OperationCompleted',
    );
  });

  it('a Start fails with the VM failure that followed it, and when the state was set back', () => {
    const start = op('Start', false, signalled);
    const failedAfter = {
      conditions: [
        {
          type: 'Running',
          status: 'False' as const,
          reason: 'RunnerFailed',
          message: 'no such CD image',
          lastTransitionTime: '2026-01-01T00:00:05Z',
        },
      ],
    };
    expect(completion(start, vm('Running', 'Failed', undefined, failedAfter))).toEqual({
      reason: 'OperationFailed',
      message: 'no such CD image',
    });
    expect(completion(start, vm('Stopped', 'Stopped'))?.reason).toBe('OperationFailed');
    expect(completion(start, vm('Running', 'Running'))?.reason).toBe('OperationCompleted');
  });

  it('a Start of a VM in its start back-off fails when the new runner pod fails too (Running stayed False)', () => {
    const start = op('Start', false, signalled);
    const failed = (podUid: string) => ({
      runner: { runId: podUid, seq: 1, podUid },
      conditions: [
        {
          type: 'Running',
          status: 'False' as const,
          reason: 'CrashLoopBackOff',
          message: 'no such CD image; 1 failed start(s) in a row',
          lastTransitionTime: '2025-12-31T23:59:00Z', // before the signal
        },
      ],
    });
    expect(completion(start, vm('Running', 'Failed', undefined, failed('old-pod')))).toBeUndefined();
    expect(completion(start, vm('Running', 'Failed', undefined, failed('new-pod')))).toEqual({
      reason: 'OperationFailed',
      message: 'no such CD image; 1 failed start(s) in a row',
    });
  });

  it('a Reset completes when the runner reports this request carried out', () => {
    const reset = op('Reset', false, signalled);
    expect(completion(reset, vm('Running', 'Running'))).toBeUndefined();
    const done = { lastReset: { request: 'op-reset', time: 't' } };
    expect(completion(reset, vm('Running', 'Running', undefined, done))?.reason).toBe('OperationCompleted');
  });

  it('a Stop completes when the VM is Stopped', () => {
    const stop = op('Stop', false, signalled);
    expect(completion(stop, vm('Stopped', 'Stopping'))).toBeUndefined();
    expect(completion(stop, vm('Stopped', 'Stopped'))?.reason).toBe('OperationCompleted');
  });
});
