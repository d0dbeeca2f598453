import { ApiException } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { displaySecretStep } from '../../../../src/reconcilers/virtual-machine/runner-config/display-secret-step.js';
import { callNames, testVm, vmState } from './vm-state-fixture.js';

const spice = { display: { spice: { port: 5930, generateSecret: true } } };

describe('step: display Secret', () => {
  it('makes a locked Secret for a running SPICE VM that has none, and the later steps use it', async () => {
    const { state, calls } = vmState({ vm: testVm(spice) });
    expect(await displaySecretStep.run(state)).toEqual({ writes: ['display Secret (generated, locked)'] });
    expect(callNames(calls)).toEqual(['core.createNamespacedSecret']);
    expect(state.displaySecret?.metadata?.name).toBe('vm-display-secret');
    expect(state.plan.displaySecretName).toBe('vm-display-secret');
  });

  it('keeps the VM’s own Secret, and makes none for a VM without SPICE', async () => {
    const own = { metadata: { name: 'mine', resourceVersion: '5' } };
    const withOwn = vmState({ vm: testVm(spice), seen: { displaySecret: own } });
    expect(await displaySecretStep.run(withOwn.state)).toBeUndefined();
    expect(withOwn.state.displaySecret).toBe(own);
    const plain = vmState({ vm: testVm({ display: { outputs: 1 } }) });
    expect(await displaySecretStep.run(plain.state)).toBeUndefined();
    expect(plain.calls).toEqual([]);
  });

  it('made by another replica meanwhile: ends the reconcile, to look again once the cache has it', async () => {
    const conflict = () => {
      throw new ApiException(409, 'Conflict', {}, {});
    };
    const { state } = vmState({ vm: testVm(spice), answers: { 'core.createNamespacedSecret': conflict } });
    expect(await displaySecretStep.run(state)).toEqual({ end: { requeueAfter: 500 } });
  });

  it('refused by the apiserver: kept as the reconcile’s refusal', async () => {
    const refused = () => {
      throw new ApiException(403, 'Forbidden', { message: 'secrets is forbidden' }, {});
    };
    const { state } = vmState({ vm: testVm(spice), answers: { 'core.createNamespacedSecret': refused } });
    await displaySecretStep.run(state);
    expect(state.rejected).toMatch(/forbidden/);
  });
});
