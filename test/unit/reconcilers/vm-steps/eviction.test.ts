import { describe, expect, it } from 'vitest';
import { nodeFacts } from '../../../../src/reconcilers/virtual-machine/node-facts.js';
import { evictionStep } from '../../../../src/reconcilers/virtual-machine/migration/eviction-step.js';
import { callNames, runningPod, testVm, vmState } from './vm-state-fixture.js';

const ready = { status: { conditions: [{ type: 'Ready', status: 'True' }] } };
/** A running VM that moves live (spec.evictionStrategy LiveMigrate), on node-1, cordoned or not. */
function liveMigrating(cordoned: boolean) {
  const fixture = vmState({
    vm: testVm(
      {},
      {
        spec: { vm: { state: 'Running', maximumRam: '256Mi' }, evictionStrategy: 'LiveMigrate' },
        status: { runnerPod: { name: 'vm' } },
      },
    ),
    seen: {
      pods: { runner: [runningPod()], importer: [], attach: [] },
      node: (name) => nodeFacts(name, { ...ready, spec: { unschedulable: cordoned && name === 'node-1' } }),
      nodes: [nodeFacts('node-1', ready), nodeFacts('node-2', ready)],
    },
  });
  return fixture;
}

describe('step: eviction', () => {
  it('a VM that moves live gets a disruption budget: a drain cannot evict its pod', async () => {
    const { state, calls } = liveMigrating(false);
    expect(await evictionStep.run(state)).toEqual({ writes: ['PodDisruptionBudget'], events: [] });
    expect(callNames(calls)).toEqual(['apply']);
    expect(calls[0]!.args).toMatchObject({
      kind: 'PodDisruptionBudget',
      metadata: { name: 'vm' },
      // An integer: the disruption controller cannot compute maxUnavailable for pods of a VM.
      spec: { minAvailable: 1 },
    });
    expect(calls[0]!.args).not.toHaveProperty('spec.maxUnavailable');
  });

  it('while it moves, source and target must both stay: the budget asks for two, and for one again after', async () => {
    const moving = liveMigrating(false);
    moving.state.plan.migration.plan.migrating = true;
    await evictionStep.run(moving.state);
    expect(moving.calls[0]!.args).toMatchObject({ spec: { minAvailable: 2 } });

    const kept = liveMigrating(false);
    kept.state.seen.owned.budget = { metadata: { name: 'vm', namespace: 'ns' }, spec: { minAvailable: 1 } };
    expect(await evictionStep.run(kept.state)).toEqual({ writes: [], events: [] });

    const moved = liveMigrating(false);
    moved.state.seen.owned.budget = { metadata: { name: 'vm', namespace: 'ns' }, spec: { minAvailable: 2 } };
    expect(await evictionStep.run(moved.state)).toEqual({ writes: ['PodDisruptionBudget'], events: [] });
    expect(moved.calls[0]!.args).toMatchObject({ spec: { minAvailable: 1 } });
  });

  it('its node cordoned: an evacuation (a live migration) is made, and told', async () => {
    const { state, calls } = liveMigrating(true);
    // Its disks are on shared storage (migration/migratable.ts): it can move.
    state.plan.migration.migratable = { migratable: true, reason: 'Migratable', message: 'it can move' };
    const result = await evictionStep.run(state);
    expect(callNames(calls)).toEqual(['apply', 'createOperation']);
    expect(result).toMatchObject({
      events: [
        { reason: 'Evacuating', message: 'node node-1 is cordoned: moving the VM live to another node' },
      ],
    });
  });

  it('a VM that does not move live: its budget goes', async () => {
    const budget = { metadata: { name: 'vm', namespace: 'ns' } };
    const { state, calls } = vmState({ seen: { owned: { hasMigrationKeys: false, budget } } });
    expect(await evictionStep.run(state)).toEqual({ writes: ['PodDisruptionBudget (deleted)'], events: [] });
    expect(callNames(calls)).toEqual(['objects.delete']);
  });
});
