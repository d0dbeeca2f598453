import { describe, expect, it } from 'vitest';
import { assignmentStep } from '../../../../src/reconcilers/virtual-machine/status/assignment-step.js';
import { callNames, testVm, vmState } from './vm-state-fixture.js';

const assignment = { pool: 'desks', user: 'alice', lastUsed: '2026-11-27T10:00:00Z' };

describe('step: pool assignment', () => {
  it('a released assignment is told, and the person logged in for it is logged out', async () => {
    const vm = testVm({ display: { loggedInUser: 'alice' } }, { status: { assignment } });
    const { state, calls } = vmState({ vm });
    state.held = { released: 'its pool desks is gone' };
    const result = await assignmentStep.run(state);
    expect(result).toMatchObject({
      events: [{ reason: 'AssignmentReleased', message: 'its pool desks is gone' }],
      writes: ['spec.vm.display.loggedInUser=null (assignment released)'],
    });
    expect(callNames(calls)).toEqual(['customObjects.patchNamespacedCustomObject']);
  });

  it('a kept assignment is looked at again when its retention ends', async () => {
    const { state, calls } = vmState({ vm: testVm({}, { status: { assignment } }) });
    state.held = { assignment, recheckInMs: 60_000 };
    expect(await assignmentStep.run(state)).toEqual({ requeueAfterMs: 60_000 });
    expect(calls).toEqual([]);
  });
});
