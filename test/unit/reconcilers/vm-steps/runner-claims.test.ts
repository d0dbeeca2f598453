import { describe, expect, it } from 'vitest';
import { runnerClaimsStep } from '../../../../src/reconcilers/virtual-machine/disks/steps.js';
import { callNames, fastDisk, immediateClass, testVm, vmState } from './vm-state-fixture.js';

describe('step: runner pod claims', () => {
  it("the runner pod's claims of an Immediate class are made before it, and it waits for them", async () => {
    const { state, calls } = vmState({
      vm: testVm({ disks: [fastDisk()] }),
      seen: {
        storageClasses: {
          byName: (n) => (n === 'fast' ? immediateClass : undefined),
          byDefault: () => undefined,
        },
      },
    });
    expect(state.podPlan.create).toBeUndefined();
    expect(state.plan.waiting).toEqual({
      reason: 'WaitingForVolumeBinding',
      message: 'the runner pod waits for its claims to be bound: vm-system-disk (it is being made)',
    });
    expect(await runnerClaimsStep.run(state)).toEqual({
      writes: ['PersistentVolumeClaim vm-runner-data', 'PersistentVolumeClaim vm-system-disk'],
    });
    expect(callNames(calls)).toEqual([
      'core.createNamespacedPersistentVolumeClaim',
      'core.createNamespacedPersistentVolumeClaim',
    ]);
  });
});
