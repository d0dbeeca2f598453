import { describe, expect, it } from 'vitest';
import { migrationStep } from '../../../../src/reconcilers/virtual-machine/migration/step.js';
import { callNames, runningPod, vmState } from './vm-state-fixture.js';

describe('step: migration', () => {
  it("carries out the plan's writes and looks again when the plan says", async () => {
    const { state, calls } = vmState({ options: { cache: { get: () => undefined, list: () => [] } } });
    const target = runningPod('vm-target');
    Object.assign(state.plan.migration.plan, {
      createTarget: { pod: target, claims: [] },
      requeueAfterMs: 5_000,
    });
    const result = await migrationStep.run(state);
    expect(callNames(calls)).toEqual(['core.createNamespacedPod']);
    expect(result).toMatchObject({ requeueAfterMs: 5_000 });
  });

  it('writes nothing while the spec has errors or a write was refused, but still looks again', async () => {
    const { state, calls } = vmState();
    Object.assign(state.plan.migration.plan, {
      createTarget: { pod: runningPod('t'), claims: [] },
      requeueAfterMs: 5_000,
    });
    state.rejected = 'the apiserver said no';
    expect(await migrationStep.run(state)).toEqual({ writes: [], requeueAfterMs: 5_000 });
    expect(calls).toEqual([]);
  });
});
