// The start back-off (KubeVirt's crash-loop back-off, pure): a VM whose runner fails before the
// guest ever ran is started again after 10 s × failures² plus up to half of that as jitter, at
// most 300 s. The runner waits meanwhile (whenStartFails waitForRetry); vmop replaces its pod when
// the time has come. A run of the guest, a Start or Restart operation, a stop or a changed config
// ends the waiting.
import { createHash } from 'node:crypto';
import type { RunnerSnapshot } from '../../../api/runner-snapshot.js';
import type { StartFailure, VirtualMachine } from '../../../api/virtual-machine.js';
import { START_REQUEST_ANNOTATION } from '../naming.js';
import { kubeTime } from '../../../kube/time.js';

export const START_BACKOFF = { baseSeconds: 10, maxSeconds: 300 };

/** The delay after `failures` start failures in a row; `jitter` in [0, 1) adds up to half of it. */
export function startBackoffSeconds(failures: number, jitter: number): number {
  const delay = START_BACKOFF.baseSeconds * failures ** 2;
  return Math.min(START_BACKOFF.maxSeconds, Math.round(delay + (jitter * delay) / 2));
}

/** A jitter in [0, 1) that stays the same for one failed runner start (so reconciles agree). */
function jitterOf(runId: string): number {
  return createHash('sha256').update(runId).digest().readUInt32BE(0) / 2 ** 32;
}

/** The snapshot is of a runner that failed to start and waits for the retry. */
export function isFailedStart(snapshot: RunnerSnapshot | undefined): snapshot is RunnerSnapshot {
  return snapshot?.phase === 'failed' && snapshot.startFailed === true;
}

/**
 * The VM's start-failure record after what its current runner reports (`snapshot`: of the
 * current pod's runner only). Manual VMs stop after a failure instead (run-policy.ts).
 */
export function nextStartFailure(
  vm: VirtualMachine,
  snapshot: RunnerSnapshot | undefined,
  now: Date,
): StartFailure | undefined {
  const previous = vm.status?.startFailure;
  if (vm.spec.vm.state !== 'Running' || vm.spec.runPolicy === 'Manual') return undefined;
  if (snapshot?.phase === 'booting' || snapshot?.phase === 'running') return undefined;
  const startRequest = vm.metadata.annotations?.[START_REQUEST_ANNOTATION];
  if (previous && previous.startRequest !== startRequest) {
    // A Start or Restart operation: start afresh, but do not count the failure seen already again.
    const { retryAfter: _, ...rest } = previous;
    return { ...rest, consecutiveFailCount: 0, ...(startRequest && { startRequest }) };
  }
  if (!isFailedStart(snapshot) || snapshot.runId === previous?.lastFailedRunId) return previous;
  const count = (previous?.consecutiveFailCount ?? 0) + 1;
  const delayMs = startBackoffSeconds(count, jitterOf(snapshot.runId)) * 1000;
  return {
    consecutiveFailCount: count,
    lastFailedRunId: snapshot.runId,
    lastFailureTime: kubeTime(now),
    retryAfter: kubeTime(new Date(now.getTime() + delayMs)),
    ...(startRequest && { startRequest }),
  };
}

/** The runner of `snapshot` waits out the back-off recorded in `startFailure`. */
export function isBackingOff(
  startFailure: StartFailure | undefined,
  snapshot: RunnerSnapshot | undefined,
): startFailure is StartFailure & { retryAfter: string } {
  return (
    isFailedStart(snapshot) &&
    startFailure?.lastFailedRunId === snapshot.runId &&
    startFailure.retryAfter !== undefined
  );
}

/**
 * When to replace the failed runner's pod: 0 = now, a number of ms = later, undefined = not (no
 * failed start waits). A changed config is tried at once: it may be the fix.
 */
export function startRetryInMs(
  startFailure: StartFailure | undefined,
  snapshot: RunnerSnapshot | undefined,
  desiredConfig: string,
  now: Date,
): number | undefined {
  if (!isFailedStart(snapshot) || startFailure?.lastFailedRunId !== snapshot.runId) return undefined;
  if (startFailure.retryAfter === undefined || snapshot.config !== desiredConfig) return 0;
  return Math.max(0, new Date(startFailure.retryAfter).getTime() - now.getTime());
}
