import type { V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import {
  backingPathOf,
  desiredPersistentVolume,
  needsProvisioning,
  provisionedBackingPath,
  requestedBytes,
} from '../../../src/node/volumes/persistent-volume.js';

const claim = (spec: V1PersistentVolumeClaim['spec'] = {}): V1PersistentVolumeClaim => ({
  metadata: { name: 'system-disk-vm-0', namespace: 'ns', uid: 'c1' },
  spec: {
    accessModes: ['ReadWriteOnce'],
    volumeMode: 'Block',
    resources: { requests: { storage: '64Mi' } },
    ...spec,
  },
  status: { phase: 'Pending' },
});

describe('local volume provisioning', () => {
  it('provisions pending claims that neither name nor select a volume', () => {
    expect(needsProvisioning(claim())).toBe(true);
    expect(needsProvisioning(claim({ selector: { matchLabels: { disk: 'system' } } }))).toBe(false);
    expect(needsProvisioning(claim({ volumeName: 'pv-1' }))).toBe(false);
    expect(needsProvisioning({ ...claim(), status: { phase: 'Bound' } })).toBe(false);
  });

  it('makes a retained local PV on this node, pre-bound to the claim, with its size, mode and class', () => {
    const volume = desiredPersistentVolume(
      claim({ storageClassName: 'local' }),
      'here',
      '/state/volumes/x.img',
    );
    expect(volume.metadata).toEqual({
      name: 'vmop-local-c1',
      labels: { 'vmop.jdrupes.org/provisioned-by': 'here' },
    });
    expect(volume.spec).toMatchObject({
      capacity: { storage: '64Mi' },
      accessModes: ['ReadWriteOnce'],
      volumeMode: 'Block',
      storageClassName: 'local',
      persistentVolumeReclaimPolicy: 'Retain',
      claimRef: { namespace: 'ns', name: 'system-disk-vm-0', uid: 'c1' },
      local: { path: '/state/volumes/x.img' },
    });
    expect(volume.spec?.nodeAffinity?.required?.nodeSelectorTerms[0]?.matchExpressions).toEqual([
      { key: 'kubernetes.io/hostname', operator: 'In', values: ['here'] },
    ]);
    expect(backingPathOf(volume)).toBe('/state/volumes/x.img');
  });

  it('backs Block claims with an image file and Filesystem claims with a directory', () => {
    expect(provisionedBackingPath('/v', claim())).toBe('/v/vmop-local-c1.img');
    expect(provisionedBackingPath('/v', claim({ volumeMode: 'Filesystem' }))).toBe('/v/vmop-local-c1');
  });

  it('reads the requested size', () => {
    expect(requestedBytes(claim())).toBe(64 * 2 ** 20);
    expect(requestedBytes(claim({ resources: {} }))).toBe('the claim requests no storage size');
  });
});
