import { describe, expect, it } from 'vitest';
import { runnerIdentityStep } from '../../../../src/reconcilers/virtual-machine/runner-config/identity-step.js';
import { callNames, vmState } from './vm-state-fixture.js';

describe('step: runner identity', () => {
  it('the namespace gets the runner Secret with the Redis URL, and the runner ServiceAccount', async () => {
    const { state, calls } = vmState();
    expect(await runnerIdentityStep.run(state)).toEqual({ writes: ['runner Secret', 'ServiceAccount'] });
    expect(callNames(calls)).toEqual(['applyShared', 'applyShared']);
    const secret = calls[0]!.args as { data: { url: string } };
    expect(Buffer.from(secret.data.url, 'base64').toString()).toBe('redis://runner@redis:6379');
  });

  it('nothing written when they are in place (applyShared compares with the cached ones)', async () => {
    const { state } = vmState({ answers: { applyShared: () => undefined } });
    expect(await runnerIdentityStep.run(state)).toEqual({ writes: [] });
  });
});
