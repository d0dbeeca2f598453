import { describe, expect, it } from 'vitest';
import { runPolicyStep } from '../../../../src/reconcilers/virtual-machine/lifecycle/run-policy-step.js';
import { callNames, testVm, vmState } from './vm-state-fixture.js';

describe('step: run policy', () => {
  it('stops the VM for good, guarded by the resourceVersion the status write left, and tells why', async () => {
    const { state, calls } = vmState();
    state.policyStop = {
      reason: 'StoppedByGuest',
      message: 'the guest powered itself off; the VM stays off',
    };
    state.resourceVersion = '12';
    expect(await runPolicyStep.run(state)).toEqual({
      writes: ['spec.vm.state=Stopped (StoppedByGuest)'],
      events: [
        {
          type: 'Normal',
          reason: 'StoppedByGuest',
          message: 'the guest powered itself off; the VM stays off',
        },
      ],
    });
    expect(calls[0]!.args).toMatchObject({
      body: { metadata: { resourceVersion: '12' }, spec: { vm: { state: 'Stopped' } } },
    });
  });

  it('restartApprovalMode Automatic: changes waiting for a restart get a Restart operation', async () => {
    const vm = testVm(
      {},
      {
        spec: {
          vm: { state: 'Running', maximumRam: '256Mi' },
          disruptions: { restartApprovalMode: 'Automatic' },
        },
      },
    );
    const { state, calls } = vmState({ vm });
    state.status = {
      phase: 'Running',
      restartAwaitingChanges: [
        { operation: 'replace', path: 'spec.vm.maximumRam', currentValue: '128Mi', desiredValue: '256Mi' },
      ],
    };
    state.plan.podSnapshot = { config: state.plan.runnerConfig.digest } as never;
    expect(await runPolicyStep.run(state)).toMatchObject({
      writes: ['VirtualMachineOperation vm-auto-restart-1 (restartApprovalMode Automatic)'],
      events: [
        {
          reason: 'RestartToApplyChanges',
          message: 'restarting to apply spec.vm.maximumRam (restartApprovalMode Automatic)',
        },
      ],
    });
    expect(callNames(calls)).toEqual(['createOperation']);
  });

  it('nothing otherwise', async () => {
    const { state, calls } = vmState();
    state.status = { phase: 'Running' };
    expect(await runPolicyStep.run(state)).toBeUndefined();
    expect(calls).toEqual([]);
  });
});
