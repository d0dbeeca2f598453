import { ApiException } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { loadBalancerStep } from '../../../../src/reconcilers/virtual-machine/load-balancer/step.js';
import { callNames, testVm, vmState } from './vm-state-fixture.js';

// A SPICE VM under a manager whose VMs get one by default.
const wantsOne = { vm: testVm(), options: { loadBalancer: { enabled: true } } };
const notFound = () => Promise.reject(new ApiException(404, 'Not Found', {}, {}));

describe('step: load balancer', () => {
  it('makes the VM’s LoadBalancer Service when it wants one', async () => {
    const { state, calls } = vmState({ ...wantsOne, answers: { 'core.readNamespacedService': notFound } });
    expect(await loadBalancerStep.run(state)).toEqual({ writes: ['Service'] });
    expect(callNames(calls)).toEqual(['core.readNamespacedService', 'apply']);
    expect(state.loadBalancer).toEqual({ ready: true });
  });

  it('never takes over a Service of that name that is not the VM’s: says so once, looks again in 15 s', async () => {
    const foreign = { metadata: { name: 'vm', namespace: 'ns', ownerReferences: [] } };
    const { state } = vmState({ ...wantsOne, answers: { 'core.readNamespacedService': foreign } });
    const result = await loadBalancerStep.run(state);
    expect(result).toMatchObject({
      requeueAfterMs: 15_000,
      events: [{ type: 'Warning', reason: 'LoadBalancerServiceNameTaken' }],
    });
    expect(state.loadBalancer).toMatchObject({ ready: false });
  });

  it('deletes its own Service when the VM no longer wants one; leaves a foreign one alone', async () => {
    const ours = {
      metadata: {
        name: 'vm',
        ownerReferences: [
          { apiVersion: 'vmoperator.jdrupes.org/v1', kind: 'VirtualMachine', name: 'vm', uid: 'vm-uid' },
        ],
      },
    };
    const { state, calls } = vmState({ seen: { owned: { hasMigrationKeys: false, service: ours } } });
    expect(await loadBalancerStep.run(state)).toEqual({ writes: ['Service (deleted)'] });
    expect(callNames(calls)).toEqual(['core.deleteNamespacedService']);
    const theirs = vmState({
      seen: { owned: { hasMigrationKeys: false, service: { metadata: { name: 'vm' } } } },
    });
    expect(await loadBalancerStep.run(theirs.state)).toBeUndefined();
    expect(theirs.calls).toEqual([]);
  });
});
