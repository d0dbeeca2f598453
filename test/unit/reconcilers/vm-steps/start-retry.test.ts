import { describe, expect, it } from 'vitest';
import type { RunnerSnapshot } from '../../../../src/api/runner-snapshot.js';
import { startRetryStep } from '../../../../src/reconcilers/virtual-machine/lifecycle/start-retry-step.js';
import { callNames, NOW, runningPod, testVm, vmState } from './vm-state-fixture.js';

/** A VM whose runner in pod `vm` failed to start, its back-off ending at `retryAfter`. */
function failedStart(retryAfter: string, config?: string) {
  const fixture = vmState({
    vm: testVm({ display: { outputs: 1 } }, { status: { runnerPod: { name: 'vm' } } }),
    seen: { pods: { runner: [runningPod()], importer: [], attach: [] } },
  });
  const { state } = fixture;
  const snapshot: RunnerSnapshot = {
    seq: 3,
    runId: 'run-1',
    pod: 'vm',
    podUid: 'vm-uid',
    phase: 'failed',
    startFailed: true,
    cpus: 0,
    ram: 0,
    drives: {},
    booted: false,
    config: config ?? state.plan.runnerConfig.digest,
    updatedAt: NOW.toISOString(),
  };
  state.plan.podSnapshot = snapshot;
  state.status = {
    startFailure: {
      consecutiveFailCount: 2,
      lastFailedRunId: 'run-1',
      lastFailureTime: NOW.toISOString(),
      retryAfter,
    },
  };
  return fixture;
}

describe('step: start retry', () => {
  it('waits out the back-off', async () => {
    const { state, calls } = failedStart(new Date(NOW.getTime() + 20_000).toISOString());
    expect(await startRetryStep.run(state)).toEqual({ requeueAfterMs: 20_000 });
    expect(calls).toEqual([]);
  });

  it('then deletes the failed pod (the next reconcile makes a new one) and tells why', async () => {
    const { state, calls } = failedStart(new Date(NOW.getTime() - 1).toISOString());
    expect(await startRetryStep.run(state)).toMatchObject({
      writes: ['Pod deleted (start retry)'],
      events: [
        { reason: 'RetryingStart', message: 'starting the VM again after 2 failed start(s) in a row' },
      ],
    });
    expect(callNames(calls)).toEqual(['core.deleteNamespacedPod']);
  });

  it('a changed config is tried at once, back-off or not: it may be the fix', async () => {
    const { state } = failedStart(new Date(NOW.getTime() + 20_000).toISOString(), 'an older config');
    expect(await startRetryStep.run(state)).toMatchObject({ writes: ['Pod deleted (start retry)'] });
  });

  it('not when the run policy stops the VM instead', async () => {
    const { state, calls } = failedStart(new Date(NOW.getTime() - 1).toISOString());
    state.policyStop = {
      reason: 'StoppedAfterFailure',
      message: 'failed; runPolicy Manual keeps the VM off',
    };
    expect(await startRetryStep.run(state)).toBeUndefined();
    expect(calls).toEqual([]);
  });
});
