import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { placement } from '../../../src/node/scheduling.js';

const labels = { 'kubernetes.io/hostname': 'here', 'vmop.jdrupes.org/local-node': 'true' };
const runnerPod = (spec: Partial<NonNullable<V1Pod['spec']>> = {}, extra: Partial<V1Pod> = {}): V1Pod => ({
  metadata: { name: 'vm-0', labels: { 'app.kubernetes.io/name': 'vm-runner' } },
  spec: { containers: [{ name: 'runner' }], ...spec },
  ...extra,
});

describe('which pods the node takes', () => {
  it('binds unscheduled runner pods whose nodeSelector the node satisfies', () => {
    expect(placement(runnerPod(), 'here', labels)).toBe('bind');
    expect(
      placement(runnerPod({ nodeSelector: { 'vmop.jdrupes.org/local-node': 'true' } }), 'here', labels),
    ).toBe('bind');
    expect(
      placement(runnerPod({ nodeSelector: { 'kubernetes.io/hostname': 'there' } }), 'here', labels),
    ).toBe('not-ours');
  });

  it('adopts pods bound to it and leaves those of other nodes', () => {
    expect(placement(runnerPod({ nodeName: 'here' }), 'here', labels)).toBe('ours');
    expect(placement(runnerPod({ nodeName: 'there' }), 'here', labels)).toBe('not-ours');
  });

  it('binds neither other pods, nor pods being deleted, nor finished ones', () => {
    expect(
      placement({ ...runnerPod(), metadata: { name: 'web-0', labels: { app: 'web' } } }, 'here', labels),
    ).toBe('not-ours');
    const deleting = runnerPod();
    deleting.metadata!.deletionTimestamp = new Date();
    expect(placement(deleting, 'here', labels)).toBe('not-ours');
    expect(placement(runnerPod({}, { status: { phase: 'Succeeded' } }), 'here', labels)).toBe('not-ours');
  });
});
