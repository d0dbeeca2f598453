import type { V1PersistentVolumeClaim, V1StorageClass } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import { planDiskSizes } from '../../../src/reconcilers/virtual-machine/disks/sizes.js';
import { runnerClaims } from '../../../src/reconcilers/virtual-machine/disks/claims.js';

/** A VM with one disk of `size` on `storageClassName`. */
function vmWithDisk(size: string, storageClassName = 'expandable') {
  return VirtualMachine.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachine',
    metadata: { name: 'vm', namespace: 'ns' },
    spec: {
      vm: {
        maximumRam: '256Mi',
        disks: [
          {
            volumeClaimTemplate: {
              metadata: { name: 'data' },
              spec: { storageClassName, resources: { requests: { storage: size } } },
            },
          },
          { cdrom: { image: '' } },
        ],
      },
    },
  });
}

/** The disk's claim as it is: asking for `asked`, holding `capacity`. */
function claim(asked: string, capacity?: string, storageClassName = 'expandable'): V1PersistentVolumeClaim {
  return {
    metadata: { name: 'vm-data-disk', namespace: 'ns' },
    spec: { storageClassName, volumeMode: 'Block', resources: { requests: { storage: asked } } },
    ...(capacity && { status: { phase: 'Bound', capacity: { storage: capacity } } }),
  };
}

const classes: Record<string, V1StorageClass> = {
  expandable: { provisioner: 'p', allowVolumeExpansion: true },
  fixed: { provisioner: 'p' },
};

function plan(vm: VirtualMachine, existing: V1PersistentVolumeClaim[]) {
  return planDiskSizes(runnerClaims(vm, existing), existing, (name) => classes[name]);
}

describe('disk sizes', () => {
  it('a disk as big as its spec says: Ready, its size for the runner, condition Resized True', () => {
    const sizes = plan(vmWithDisk('16Mi'), [claim('16Mi', '16Mi')]);
    expect(sizes.expand).toEqual([]);
    expect(sizes.statuses).toEqual([
      { name: 'data-disk', claim: 'vm-data-disk', capacity: '16Mi', phase: 'Ready' },
    ]);
    expect(sizes.capacities).toEqual({ 'data-disk': '16Mi' });
    expect(sizes.condition).toMatchObject({ type: 'Resized', status: 'True' });
  });

  it('a claim not made or not bound yet: Pending, no size for the runner', () => {
    expect(plan(vmWithDisk('16Mi'), []).statuses).toEqual([
      { name: 'data-disk', claim: 'vm-data-disk', phase: 'Pending' },
    ]);
    expect(plan(vmWithDisk('16Mi'), [claim('16Mi')]).capacities).toEqual({});
  });

  it('raised in the spec: the claim is expanded, the disk Resizing until the claim holds it; the runner keeps the size it has', () => {
    const sizes = plan(vmWithDisk('32Mi'), [claim('16Mi', '16Mi')]);
    expect(sizes.expand).toEqual([{ claim: 'vm-data-disk', storage: '32Mi' }]);
    expect(sizes.statuses[0]).toMatchObject({ phase: 'Resizing', capacity: '16Mi' });
    expect(sizes.capacities).toEqual({ 'data-disk': '16Mi' });
    expect(sizes.condition).toMatchObject({ status: 'False', reason: 'Resizing' });
    expect(sizes.condition.message).toBe('growing: data-disk (16Mi → 32Mi)');

    const asked = plan(vmWithDisk('32Mi'), [claim('32Mi', '16Mi')]);
    expect(asked.expand).toEqual([]);
    expect(asked.statuses[0]).toMatchObject({ phase: 'Resizing' });

    const grown = plan(vmWithDisk('32Mi'), [claim('32Mi', '32Mi')]);
    expect(grown.statuses[0]).toMatchObject({ phase: 'Ready', capacity: '32Mi' });
    expect(grown.capacities).toEqual({ 'data-disk': '32Mi' });
  });

  it('quantities compare by size, not by how they are written', () => {
    expect(plan(vmWithDisk('1Gi'), [claim('1024Mi', '1024Mi')]).expand).toEqual([]);
  });

  it('a shrink is refused with a message, and nothing changes', () => {
    const sizes = plan(vmWithDisk('8Mi'), [claim('16Mi', '16Mi')]);
    expect(sizes.expand).toEqual([]);
    expect(sizes.statuses[0]).toMatchObject({ phase: 'Ready', capacity: '16Mi' });
    expect(sizes.condition).toEqual({
      type: 'Resized',
      status: 'False',
      reason: 'ShrinkRefused',
      message: 'disk data-disk: 8Mi is less than the 16Mi of its claim vm-data-disk; a disk cannot shrink',
    });
  });

  it('a StorageClass without expansion: refused with a message', () => {
    const sizes = plan(vmWithDisk('32Mi', 'fixed'), [claim('16Mi', '16Mi', 'fixed')]);
    expect(sizes.expand).toEqual([]);
    expect(sizes.condition).toMatchObject({ status: 'False', reason: 'ExpansionNotAllowed' });
    expect(sizes.condition.message).toBe(
      'disk data-disk: its claim vm-data-disk cannot grow to 32Mi: StorageClass fixed does not allow volume expansion',
    );
  });
});
