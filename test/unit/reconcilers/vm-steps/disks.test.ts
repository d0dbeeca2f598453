import type { V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import {
  diskAttachmentsStep,
  diskExpansionStep,
  diskImportsStep,
  runnerClaimsStep,
} from '../../../../src/reconcilers/virtual-machine/disks/steps.js';
import { callNames, testVm, vmState } from './vm-state-fixture.js';

const immediate = { metadata: { name: 'fast' }, provisioner: 'x', volumeBindingMode: 'Immediate' };
const disk = (source?: object) => ({
  volumeClaimTemplate: {
    metadata: { name: 'system' },
    spec: { storageClassName: 'fast', resources: { requests: { storage: '1Gi' } } },
  },
  ...(source && { source }),
});

describe('steps: disks', () => {
  it('a disk with a source: its claim is made first and imported into; the VM waits for it', async () => {
    const { state, calls } = vmState({
      vm: testVm({ disks: [disk({ http: { url: 'http://x/a.qcow2' } })] }),
    });
    const result = await diskImportsStep.run(state);
    expect(result).toMatchObject({ writes: ['PersistentVolumeClaim vm-system-disk (to import into)'] });
    expect(callNames(calls)).toEqual(['core.createNamespacedPersistentVolumeClaim']);
    expect(state.plan.waiting?.reason).toBe('ImportingDisks');
  });

  it("the runner pod's claims of an Immediate class are made before it, and it waits for them", async () => {
    const { state, calls } = vmState({
      vm: testVm({ disks: [disk()] }),
      seen: {
        storageClasses: { byName: (n) => (n === 'fast' ? immediate : undefined), byDefault: () => undefined },
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

  it('a claim raised in the spec grows, when its StorageClass allows it', async () => {
    const claim: V1PersistentVolumeClaim = {
      metadata: { name: 'vm-system-disk', labels: { 'vmrunner.jdrupes.org/volume': 'system-disk' } },
      spec: { storageClassName: 'fast', resources: { requests: { storage: '512Mi' } } },
      status: { phase: 'Bound', capacity: { storage: '512Mi' } },
    };
    const expandable = { ...immediate, allowVolumeExpansion: true };
    const { state, calls } = vmState({
      vm: testVm({ disks: [disk()] }),
      seen: { claims: [claim], storageClasses: { byName: () => expandable, byDefault: () => undefined } },
    });
    expect(await diskExpansionStep.run(state)).toEqual({
      writes: ['PersistentVolumeClaim vm-system-disk (grows to 1Gi)'],
    });
    expect(calls[0]!.args).toMatchObject({ body: { spec: { resources: { requests: { storage: '1Gi' } } } } });
  });

  it('no hot-plugged disks: nothing written', async () => {
    const { state, calls } = vmState();
    expect(await diskAttachmentsStep.run(state)).toEqual({ writes: [] });
    expect(calls).toEqual([]);
  });
});
