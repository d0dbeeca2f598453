import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import type { RunnerSnapshot } from '../../../src/api/runner-snapshot.js';
import { VirtualMachine, type RunPolicy, type StartFailure } from '../../../src/api/virtual-machine.js';
import { START_REQUEST_ANNOTATION } from '../../../src/reconcilers/virtual-machine/naming.js';
import {
  isBackingOff,
  nextStartFailure,
  startBackoffSeconds,
  startRetryInMs,
} from '../../../src/reconcilers/virtual-machine/lifecycle/start-backoff.js';
import { deriveStatus } from '../../../src/reconcilers/virtual-machine/status/derive.js';

const seed = parse(readFileSync('examples/local-path-test-vm.yaml', 'utf8'));
const now = new Date('2026-11-23T10:00:00Z');

function vm(
  options: {
    state?: 'Running' | 'Stopped';
    runPolicy?: RunPolicy;
    startFailure?: StartFailure;
    startRequest?: string;
  } = {},
) {
  return VirtualMachine.parse({
    ...seed,
    metadata: {
      ...seed.metadata,
      annotations: options.startRequest ? { [START_REQUEST_ANNOTATION]: options.startRequest } : {},
    },
    spec: {
      ...seed.spec,
      ...(options.runPolicy && { runPolicy: options.runPolicy }),
      vm: { ...seed.spec.vm, state: options.state ?? 'Running' },
    },
    status: options.startFailure ? { startFailure: options.startFailure } : undefined,
  });
}

const failedStart = (runId: string, config = 'c1'): RunnerSnapshot => ({
  seq: 3,
  runId,
  pod: 'test-vm-0',
  podUid: 'pod-1',
  phase: 'failed',
  startFailed: true,
  message: 'qemu exited with code 1 during start: bad option',
  config,
  cpus: 0,
  ram: 0,
  drives: {},
  booted: false,
  updatedAt: 't',
});

const seconds = (failure: StartFailure) =>
  (new Date(failure.retryAfter!).getTime() - new Date(failure.lastFailureTime).getTime()) / 1000;

describe('the start back-off', () => {
  it('waits 10 s × failures², plus up to half of that as jitter, at most 300 s', () => {
    expect([1, 2, 3, 4, 5, 6].map((n) => startBackoffSeconds(n, 0))).toEqual([10, 40, 90, 160, 250, 300]);
    expect([1, 2, 3, 4].map((n) => startBackoffSeconds(n, 0.999))).toEqual([15, 60, 135, 240]);
    expect(startBackoffSeconds(5, 0.5)).toBe(300);
  });

  it('counts each failed runner start once and grows the delay', () => {
    const first = nextStartFailure(vm(), failedStart('run-1'), now)!;
    expect(first).toMatchObject({ consecutiveFailCount: 1, lastFailedRunId: 'run-1' });
    expect(seconds(first)).toBeGreaterThanOrEqual(10);
    expect(seconds(first)).toBeLessThanOrEqual(15);

    // The same runner reporting again is not a new failure.
    expect(nextStartFailure(vm({ startFailure: first }), failedStart('run-1'), now)).toEqual(first);

    const second = nextStartFailure(vm({ startFailure: first }), failedStart('run-2'), now)!;
    expect(second.consecutiveFailCount).toBe(2);
    expect(seconds(second)).toBeGreaterThanOrEqual(40);
    expect(seconds(second)).toBeLessThanOrEqual(60);
  });

  it('the jitter differs between failures, so VMs that fail together do not retry together', () => {
    const delays = new Set(
      ['a', 'b', 'c', 'd', 'e', 'f'].map((runId) =>
        seconds(nextStartFailure(vm(), failedStart(runId), now)!),
      ),
    );
    expect(delays.size).toBeGreaterThan(1);
  });

  it('is kept while a new runner starts (no snapshot of it yet)', () => {
    const first = nextStartFailure(vm(), failedStart('run-1'), now)!;
    expect(nextStartFailure(vm({ startFailure: first }), undefined, now)).toEqual(first);
  });

  it('ends when the guest runs, the VM is to stop, or the policy is Manual', () => {
    const record = nextStartFailure(vm(), failedStart('run-1'), now)!;
    const booting = { ...failedStart('run-2'), phase: 'booting', startFailed: undefined } as RunnerSnapshot;
    expect(nextStartFailure(vm({ startFailure: record }), booting, now)).toBeUndefined();
    expect(nextStartFailure(vm({ startFailure: record, state: 'Stopped' }), undefined, now)).toBeUndefined();
    expect(nextStartFailure(vm({ runPolicy: 'Manual' }), failedStart('run-1'), now)).toBeUndefined();
  });

  it('a Start or Restart operation resets the count, without counting the failure seen already again', () => {
    const record = nextStartFailure(vm({ startRequest: 'op-1' }), failedStart('run-1'), now)!;
    const twice = nextStartFailure(
      vm({ startFailure: record, startRequest: 'op-1' }),
      failedStart('run-2'),
      now,
    )!;
    expect(twice).toMatchObject({ consecutiveFailCount: 2, startRequest: 'op-1' });

    const reset = nextStartFailure(
      vm({ startFailure: twice, startRequest: 'op-2' }),
      failedStart('run-2'),
      now,
    )!;
    expect(reset).toMatchObject({ consecutiveFailCount: 0, lastFailedRunId: 'run-2', startRequest: 'op-2' });
    expect(reset.retryAfter).toBeUndefined();
    expect(
      nextStartFailure(vm({ startFailure: reset, startRequest: 'op-2' }), failedStart('run-2'), now),
    ).toEqual(reset);
    const again = nextStartFailure(
      vm({ startFailure: reset, startRequest: 'op-2' }),
      failedStart('run-3'),
      now,
    )!;
    expect(again.consecutiveFailCount).toBe(1);
  });

  it('retries when the time has come, at once after a reset or when the config changed, and not for another runner', () => {
    const record = nextStartFailure(vm(), failedStart('run-1'), now)!;
    const wait = startRetryInMs(record, failedStart('run-1'), 'c1', now)!;
    expect(wait).toBe(seconds(record) * 1000);
    const later = new Date(new Date(record.retryAfter!).getTime() + 1);
    expect(startRetryInMs(record, failedStart('run-1'), 'c1', later)).toBe(0);
    expect(startRetryInMs(record, failedStart('run-1'), 'c2', now)).toBe(0);
    expect(startRetryInMs({ ...record, retryAfter: undefined }, failedStart('run-1'), 'c1', now)).toBe(0);
    expect(startRetryInMs(record, failedStart('run-2'), 'c1', now)).toBeUndefined();
    expect(startRetryInMs(record, undefined, 'c1', now)).toBeUndefined();
  });

  it('status: phase Failed, reason CrashLoopBackOff, the message and the next attempt', () => {
    const snapshot = failedStart('run-1');
    const pod = {
      metadata: { name: 'test-vm-0', uid: 'pod-1' },
      spec: { nodeName: 'node-1' },
      status: {
        phase: 'Running',
        containerStatuses: [{ name: 'runner', restartCount: 0, state: { running: { startedAt: 't' } } }],
      },
    };
    const status = deriveStatus(vm(), { pod: pod as never, snapshot, specErrors: [], now });
    expect(status.phase).toBe('Failed');
    expect(status.startFailure?.consecutiveFailCount).toBe(1);
    expect(isBackingOff(status.startFailure, snapshot)).toBe(true);
    const running = status.conditions?.find((c) => c.type === 'Running');
    expect(running).toMatchObject({ status: 'False', reason: 'CrashLoopBackOff' });
    expect(running?.message).toContain('bad option');
    expect(running?.message).toContain(`vmop starts it again at ${status.startFailure?.retryAfter}`);
  });
});
