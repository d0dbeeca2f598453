import { ApiException } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { STATUS_CONFLICT } from '../../../../src/reconcilers/virtual-machine/pipeline.js';
import { statusStep } from '../../../../src/reconcilers/virtual-machine/status/step.js';
import { callNames, testVm, vmState } from './vm-state-fixture.js';

describe('step: status', () => {
  it('names the pod about to be made in a write guarded by the VM’s resourceVersion, with its Events', async () => {
    const { state, calls } = vmState({ vm: testVm({ display: { outputs: 1 } }) });
    const result = await statusStep.run(state);
    expect(state.creating).toBe(true);
    expect(callNames(calls)).toEqual(['customObjects.patchNamespacedCustomObjectStatus']);
    expect(calls[0]!.args).toMatchObject({
      body: { metadata: { resourceVersion: '10' }, status: { runnerPod: { name: 'vm' } } },
    });
    expect(result).toMatchObject({ writes: ['status'] });
    expect(state.resourceVersion).toBe('11');
  });

  it('an unchanged status is not written (unless a pod is to be made)', async () => {
    const vm = testVm({ state: 'Stopped', display: { outputs: 1 } });
    const first = vmState({ vm });
    await statusStep.run(first.state);
    const written = first.state.status;
    const again = vmState({ vm: testVm({ state: 'Stopped', display: { outputs: 1 } }, { status: written }) });
    expect(await statusStep.run(again.state)).toEqual({});
    expect(again.calls).toEqual([]);
  });

  it('refused for an older resourceVersion: ends the reconcile, to run again on the newer VM', async () => {
    const conflict = () => Promise.reject(new ApiException(409, 'Conflict', {}, {}));
    const { state } = vmState({ answers: { 'customObjects.patchNamespacedCustomObjectStatus': conflict } });
    expect(await statusStep.run(state)).toEqual({ end: STATUS_CONFLICT });
  });

  it('no pod is made while the spec has errors; the status says why', async () => {
    const { state, calls } = vmState({ vm: testVm({ currentCpus: 9, maximumCpus: 4 }) });
    await statusStep.run(state);
    expect(state.creating).toBe(false);
    const body = calls[0]!.args as {
      body: { status: { conditions: Array<{ type: string; status: string }> } };
    };
    expect(body.body.status.conditions.find((c) => c.type === 'SpecValid')?.status).toBe('False');
  });
});
