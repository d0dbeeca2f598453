import { describe, expect, it } from 'vitest';
import { legacyStatefulSetStep } from '../../../../src/reconcilers/virtual-machine/runner-pod/legacy-statefulset-step.js';
import { callNames, vmState } from './vm-state-fixture.js';

describe('step: StatefulSet of vmop 0.1', () => {
  it('deletes the StatefulSet, keeping its pod, and makes no new pod while it is there', async () => {
    const statefulSet = { metadata: { name: 'vm', namespace: 'ns', uid: 'sts-uid' } };
    const { state, calls } = vmState({ seen: { owned: { hasMigrationKeys: false, statefulSet } } });
    expect(state.podPlan.create).toBe('vm');
    expect(await legacyStatefulSetStep.run(state)).toEqual({
      writes: ['StatefulSet (deleted; its pod is kept)'],
    });
    expect(callNames(calls)).toEqual(['apps.deleteNamespacedStatefulSet']);
    expect(calls[0]!.args).toMatchObject({
      body: { propagationPolicy: 'Orphan', preconditions: { uid: 'sts-uid' } },
    });
    expect(state.podPlan.create).toBeUndefined();
  });

  it('nothing to do without one', async () => {
    const { state, calls } = vmState();
    expect(await legacyStatefulSetStep.run(state)).toBeUndefined();
    expect(calls).toEqual([]);
    expect(state.podPlan.create).toBe('vm');
  });
});
