import { ApiException } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { runnerPodCreationStep } from '../../../../src/reconcilers/virtual-machine/runner-pod/creation-step.js';
import { statusStep } from '../../../../src/reconcilers/virtual-machine/status/step.js';
import { callNames, testVm, vmState } from './vm-state-fixture.js';

describe('step: runner pod creation', () => {
  it('makes the claims that do not exist, then the pod the status named', async () => {
    const { state, calls } = vmState({ vm: testVm({ display: { outputs: 1 } }) });
    await statusStep.run(state);
    calls.length = 0;
    expect(await runnerPodCreationStep.run(state)).toEqual({
      writes: ['PersistentVolumeClaim vm-runner-data', 'Pod vm'],
    });
    expect(callNames(calls)).toEqual([
      'core.createNamespacedPersistentVolumeClaim',
      'core.createNamespacedPod',
    ]);
  });

  it('a pod the apiserver refuses: the status says so at once (nothing retries it)', async () => {
    const refused = () =>
      Promise.reject(
        new ApiException(
          422,
          'Unprocessable Entity',
          { message: 'spec.containers[0].image: Required value' },
          {},
        ),
      );
    const { state, calls } = vmState({
      vm: testVm({ display: { outputs: 1 } }),
      answers: { 'core.createNamespacedPod': refused },
    });
    await statusStep.run(state);
    calls.length = 0;
    expect(await runnerPodCreationStep.run(state)).toMatchObject({ writes: ['status'] });
    expect(state.rejected).toMatch(/Required value/);
    expect(JSON.stringify(state.status?.conditions)).toMatch(/Required value/);
  });

  it('nothing when the status step did not decide to make one', async () => {
    const { state, calls } = vmState({ vm: testVm({ state: 'Stopped' }) });
    expect(await runnerPodCreationStep.run(state)).toBeUndefined();
    expect(calls).toEqual([]);
  });
});
