import { describe, expect, it } from 'vitest';
import { diskImportsStep } from '../../../../src/reconcilers/virtual-machine/disks/steps.js';
import { callNames, fastDisk, testVm, vmState } from './vm-state-fixture.js';

describe('step: disk imports', () => {
  it('a disk with a source: its claim is made first and imported into; the VM waits for it', async () => {
    const { state, calls } = vmState({
      vm: testVm({ disks: [fastDisk({ http: { url: 'http://x/a.qcow2' } })] }),
    });
    const result = await diskImportsStep.run(state);
    expect(result).toMatchObject({ writes: ['PersistentVolumeClaim vm-system-disk (to import into)'] });
    expect(callNames(calls)).toEqual(['core.createNamespacedPersistentVolumeClaim']);
    expect(state.plan.waiting?.reason).toBe('ImportingDisks');
  });
});
