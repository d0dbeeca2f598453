import { describe, expect, it } from 'vitest';
import { diskAttachmentsStep } from '../../../../src/reconcilers/virtual-machine/disks/steps.js';
import { vmState } from './vm-state-fixture.js';

describe('step: hot-plugged disks', () => {
  it('no hot-plugged disks: nothing written', async () => {
    const { state, calls } = vmState();
    expect(await diskAttachmentsStep.run(state)).toEqual({ writes: [] });
    expect(calls).toEqual([]);
  });
});
