import type { V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { diskExpansionStep } from '../../../../src/reconcilers/virtual-machine/disks/steps.js';
import { fastDisk, immediateClass, testVm, vmState } from './vm-state-fixture.js';

describe('step: disk expansion', () => {
  it('a claim raised in the spec grows, when its StorageClass allows it', async () => {
    const claim: V1PersistentVolumeClaim = {
      metadata: { name: 'vm-system-disk', labels: { 'vmrunner.jdrupes.org/volume': 'system-disk' } },
      spec: { storageClassName: 'fast', resources: { requests: { storage: '512Mi' } } },
      status: { phase: 'Bound', capacity: { storage: '512Mi' } },
    };
    const expandable = { ...immediateClass, allowVolumeExpansion: true };
    const { state, calls } = vmState({
      vm: testVm({ disks: [fastDisk()] }),
      seen: { claims: [claim], storageClasses: { byName: () => expandable, byDefault: () => undefined } },
    });
    expect(await diskExpansionStep.run(state)).toEqual({
      writes: ['PersistentVolumeClaim vm-system-disk (grows to 1Gi)'],
    });
    expect(calls[0]!.args).toMatchObject({ body: { spec: { resources: { requests: { storage: '1Gi' } } } } });
  });
});
