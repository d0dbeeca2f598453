import type { V1PersistentVolumeClaim, V1StorageClass } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import {
  claimWait,
  claimWaitMessage,
  defaultStorageClass,
  type StorageClasses,
} from '../../../src/reconcilers/virtual-machine/disks/claim-binding.js';

const storageClass = (name: string, mode?: string, isDefault = false): V1StorageClass => ({
  metadata: {
    name,
    ...(isDefault && { annotations: { 'storageclass.kubernetes.io/is-default-class': 'true' } }),
  },
  provisioner: 'example.com/volumes',
  ...(mode && { volumeBindingMode: mode }),
});
const immediate = storageClass('immediate', 'Immediate');
const classes = (defaultClass?: V1StorageClass): StorageClasses => ({
  byName: (name) =>
    [immediate, storageClass('unset'), storageClass('later', 'WaitForFirstConsumer')].find(
      (c) => c.metadata?.name === name,
    ),
  byDefault: () => defaultClass,
});
const claim = (storageClassName?: string, phase?: string): V1PersistentVolumeClaim => ({
  metadata: { name: 'vm-runner-data' },
  spec: { ...(storageClassName !== undefined && { storageClassName }) },
  ...(phase && { status: { phase } }),
});

describe('whether a pod may be made that uses a claim', () => {
  it('a claim of an Immediate class waits until it is bound (the class without a mode too)', () => {
    expect(claimWait(claim('immediate', 'Pending'), true, classes())).toEqual({
      claim: 'vm-runner-data',
      why: 'waiting for StorageClass immediate to provide a volume',
    });
    expect(claimWait(claim('unset', 'Pending'), true, classes())?.why).toMatch(/StorageClass unset/);
    expect(claimWait(claim('immediate', 'Bound'), true, classes())).toBeUndefined();
  });

  it('a claim still to be made waits when its class, named or the default, binds at once', () => {
    expect(claimWait(claim('immediate'), false, classes())?.why).toBe('it is being made');
    expect(claimWait(claim(), false, classes(immediate))?.why).toBe('it is being made');
    expect(claimWait(claim(), false, classes())).toBeUndefined();
    expect(claimWait(claim(), false, classes(storageClass('d', 'WaitForFirstConsumer')))).toBeUndefined();
  });

  it('does not wait where the pod binds the claim or nobody can tell when it binds: the scheduler says why', () => {
    expect(claimWait(claim('later', 'Pending'), true, classes())).toBeUndefined();
    expect(claimWait(claim('', 'Pending'), true, classes())).toBeUndefined();
    expect(claimWait(claim(undefined, 'Pending'), true, classes(immediate))).toBeUndefined();
    expect(claimWait(claim('missing', 'Pending'), true, classes())).toBeUndefined();
  });

  it('a claim whose volume is lost waits, and says so', () => {
    expect(claimWait(claim('immediate', 'Lost'), true, classes())?.why).toBe('its volume is lost');
  });

  it('names every claim waited for in one message', () => {
    expect(
      claimWaitMessage('the runner pod', [
        { claim: 'a', why: 'it is being made' },
        { claim: 'b', why: 'its volume is lost' },
      ]),
    ).toBe('the runner pod waits for its claims to be bound: a (it is being made), b (its volume is lost)');
  });

  it('the default class is the newest one marked default, as the apiserver picks it', () => {
    const older = { ...storageClass('older', undefined, true) };
    older.metadata!.creationTimestamp = new Date('2026-01-01T00:00:00Z');
    const newer = { ...storageClass('newer', undefined, true) };
    newer.metadata!.creationTimestamp = new Date('2026-02-01T00:00:00Z');
    expect(defaultStorageClass([older, immediate, newer])?.metadata?.name).toBe('newer');
    expect(defaultStorageClass([immediate])).toBeUndefined();
  });
});
