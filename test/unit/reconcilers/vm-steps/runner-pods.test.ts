import { describe, expect, it } from 'vitest';
import { runnerPodsStep } from '../../../../src/reconcilers/virtual-machine/runner-pod/step.js';
import { callNames, runningPod, testVm, vmState } from './vm-state-fixture.js';

const pods = (...runner: ReturnType<typeof runningPod>[]) => ({ runner, importer: [], attach: [] });

describe('step: runner pods', () => {
  it("a stopped VM's pod is deleted with its powerdownTimeout (and a margin) as grace", async () => {
    const vm = testVm({ state: 'Stopped', powerdownTimeout: 45 }, { status: { runnerPod: { name: 'vm' } } });
    const { state, calls } = vmState({ vm, seen: { pods: pods(runningPod()) } });
    expect(await runnerPodsStep.run(state)).toEqual({ writes: ['Pod vm deleted (stop)'] });
    expect(callNames(calls)).toEqual(['core.deleteNamespacedPod']);
    expect(calls[0]!.args).toMatchObject({
      name: 'vm',
      body: { preconditions: { uid: 'vm-uid' }, gracePeriodSeconds: 45 + 5 },
    });
  });

  it('a pod it did not make (a StatefulSet’s of old) is adopted', async () => {
    const orphan = runningPod('vm-0', { metadata: { name: 'vm-0', namespace: 'ns', uid: 'vm-0-uid' } });
    const { state, calls } = vmState({
      vm: testVm({ display: { outputs: 1 } }),
      seen: { pods: pods(orphan) },
    });
    expect(await runnerPodsStep.run(state)).toEqual({ writes: ['Pod vm-0 (adopted)'] });
    expect(calls[0]!.args).toMatchObject({
      name: 'vm-0',
      body: { metadata: { ownerReferences: [{ kind: 'VirtualMachine', uid: 'vm-uid', controller: true }] } },
    });
  });

  it('a pod on a node that is gone for sure is removed at once', async () => {
    const vm = testVm({}, { status: { runnerPod: { name: 'vm' } } });
    const { state, calls } = vmState({
      vm,
      seen: {
        pods: pods(runningPod()),
        node: (name) => ({ name, state: 'Gone', unschedulable: false, outOfService: false }),
      },
    });
    expect(await runnerPodsStep.run(state)).toEqual({ writes: ['Pod vm removed (its node node-1 is gone)'] });
    expect(calls[0]!.args).toMatchObject({ name: 'vm', body: { gracePeriodSeconds: 0 } });
  });
});
