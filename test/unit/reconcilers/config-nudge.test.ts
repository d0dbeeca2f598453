import { describe, expect, it } from 'vitest';
import type { V1Pod } from '@kubernetes/client-node';
import type { RunnerSnapshot } from '../../../src/api/runner-snapshot.js';
import { MAX_RENUDGES, nudgeDecision } from '../../../src/reconcilers/virtual-machine/runner-config/nudge.js';

const now = new Date('2026-01-01T00:00:10Z');
const pod = (annotations: Record<string, string> = {}, phase = 'Running'): V1Pod => ({
  metadata: { name: 'vm-0', namespace: 'ns', uid: 'pod-1', annotations },
  status: { phase },
});
const nudged = (value: string, at: string) => ({
  'vmrunner.jdrupes.org/cmVersion': value,
  'vmoperator.jdrupes.org/config-nudged-at': at,
});
const snapshot = (config: string, podUid = 'pod-1'): RunnerSnapshot => ({
  seq: 3,
  runId: 'run',
  podUid,
  phase: 'running',
  cpus: 1,
  ram: 1,
  drives: {},
  booted: true,
  config,
  updatedAt: now.toISOString(),
});
const decide = (p: V1Pod | undefined, reported?: RunnerSnapshot) =>
  nudgeDecision({ pod: p, configVersion: '7/3', configDigest: 'new', snapshot: reported, now });

describe('nudgeDecision', () => {
  it('nudges a running pod once per config version, and looks again in 2 s', () => {
    expect(decide(pod())).toEqual({
      annotations: nudged('7/3', now.toISOString()),
      retryAfterMs: 2000,
    });
    // An older version nudged before: this one is new.
    expect(
      decide(pod(nudged('6/3#2', '2026-01-01T00:00:00Z'))).annotations?.['vmrunner.jdrupes.org/cmVersion'],
    ).toBe('7/3');
  });

  it('leaves pods alone that do not run, or whose runner has the config', () => {
    expect(decide(undefined)).toEqual({});
    expect(decide(pod({}, 'Pending'))).toEqual({});
    expect(decide(pod(nudged('7/3', '2026-01-01T00:00:09Z')), snapshot('new'))).toEqual({});
    // A snapshot of another pod (an earlier incarnation) says nothing about this one.
    expect(decide(pod(nudged('7/3', '2026-01-01T00:00:00Z')), snapshot('old', 'pod-0'))).toEqual({});
  });

  it('nudges again, with backoff, while the runner reports an older config', () => {
    // Nudged 1 s ago: the first repeat is due 2 s after it.
    expect(decide(pod(nudged('7/3', '2026-01-01T00:00:09Z')), snapshot('old'))).toEqual({
      retryAfterMs: 1000,
    });
    expect(decide(pod(nudged('7/3', '2026-01-01T00:00:07Z')), snapshot('old'))).toEqual({
      annotations: nudged('7/3#1', now.toISOString()),
      retryAfterMs: 4000,
    });
    // The second repeat waits 4 s after the first.
    expect(decide(pod(nudged('7/3#1', '2026-01-01T00:00:07Z')), snapshot('old'))).toEqual({
      retryAfterMs: 1000,
    });
    expect(decide(pod(nudged('7/3#1', '2026-01-01T00:00:05Z')), snapshot('old')).annotations).toEqual(
      nudged('7/3#2', now.toISOString()),
    );
  });

  it("gives up after the last repeat (kubelet's periodic sync is as near then)", () => {
    expect(decide(pod(nudged(`7/3#${MAX_RENUDGES}`, '2025-12-31T00:00:00Z')), snapshot('old'))).toEqual({});
  });
});
