import type { V1PersistentVolumeClaim, V1Pod, V1StorageClass } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import {
  claimWait,
  claimWaitMessage,
  defaultStorageClass,
  stuckOnBoundClaims,
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

describe('a runner pod kube-scheduler left unschedulable for claims that are bound', () => {
  const now = new Date('2026-11-27T12:00:40Z');
  const pod = (message: string, since = '2026-11-27T12:00:00Z'): V1Pod => ({
    metadata: { name: 'vm' },
    spec: {
      containers: [],
      volumes: [{ name: 'runner-data', persistentVolumeClaim: { claimName: 'vm-runner-data' } }],
    },
    status: {
      conditions: [
        {
          type: 'PodScheduled',
          status: 'False',
          reason: 'Unschedulable',
          message,
          lastTransitionTime: new Date(since),
        },
      ],
    },
  });
  const unbound = '0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found';
  const boundClaim = { metadata: { name: 'vm-runner-data' }, status: { phase: 'Bound' } };

  it('is made again 30 s after it became unschedulable, its claims bound', () => {
    expect(stuckOnBoundClaims(pod(unbound), [boundClaim], now)).toEqual({ stuck: true });
    expect(stuckOnBoundClaims(pod(unbound, '2026-11-27T12:00:30Z'), [boundClaim], now)).toEqual({
      recheckInMs: 20_000,
    });
  });

  it('not while a claim is still unbound, for another reason, or once scheduled', () => {
    const pending = { metadata: { name: 'vm-runner-data' }, status: { phase: 'Pending' } };
    expect(stuckOnBoundClaims(pod(unbound), [pending], now)).toBeUndefined();
    expect(
      stuckOnBoundClaims(pod('0/1 nodes are available: 1 Insufficient cpu.'), [boundClaim], now),
    ).toBeUndefined();
    const scheduled = { ...pod(unbound), spec: { ...pod(unbound).spec!, nodeName: 'node-1' } };
    expect(stuckOnBoundClaims(scheduled, [boundClaim], now)).toBeUndefined();
  });
});
