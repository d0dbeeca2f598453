import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import {
  podPhase,
  podStatus,
  restartPolicy,
  terminationOf,
  willRestart,
  type ContainerRecord,
} from '../../../src/node/pod-status.js';

const t0 = new Date('2030-01-01T00:00:00Z');
const t1 = new Date('2030-01-01T00:01:00Z');
const pod: V1Pod = { metadata: { name: 'vm-0', uid: 'u1' }, spec: { containers: [{ name: 'runner' }] } };
const base: ContainerRecord = {
  name: 'runner',
  image: 'runner:1',
  state: { kind: 'waiting', reason: 'ContainerCreating' },
  restartCount: 0,
};
const exited = (code: number) => terminationOf({ code }, { startedAt: t0, finishedAt: t1 });

describe('pod status of a single-container pod', () => {
  it('is Pending before the first start, Running while it runs and while it waits for a restart', () => {
    expect(podPhase(base)).toBe('Pending');
    expect(podPhase({ ...base, state: { kind: 'running', startedAt: t0, containerID: 'vmop://1' } })).toBe(
      'Running',
    );
    expect(
      podPhase({
        ...base,
        state: { kind: 'waiting', reason: 'CrashLoopBackOff' },
        lastTermination: exited(1),
      }),
    ).toBe('Running');
  });

  it('is Succeeded or Failed once the container will not run again', () => {
    expect(podPhase({ ...base, state: { kind: 'terminated', termination: exited(0) } })).toBe('Succeeded');
    expect(podPhase({ ...base, state: { kind: 'terminated', termination: exited(2) } })).toBe('Failed');
  });

  it('restarts as the restart policy says', () => {
    expect(restartPolicy(pod)).toBe('Always');
    expect(restartPolicy({ spec: { containers: [], restartPolicy: 'OnFailure' } })).toBe('OnFailure');
    expect([
      willRestart('Always', 0),
      willRestart('OnFailure', 0),
      willRestart('OnFailure', 1),
      willRestart('Never', 1),
    ]).toEqual([true, false, true, false]);
  });

  it('reports an exit by signal as 128 + the signal number, and exit 0 as Completed', () => {
    expect(terminationOf({ code: null, signalNumber: 9 }, { finishedAt: t1 })).toMatchObject({
      exitCode: 137,
      signal: 9,
      reason: 'Error',
    });
    expect(exited(0).reason).toBe('Completed');
  });

  it('reports a running container as ready, with its start time, id and restarts', () => {
    const status = podStatus({
      pod,
      container: {
        ...base,
        restartCount: 2,
        state: { kind: 'running', startedAt: t0, containerID: 'vmop://42' },
        lastTermination: exited(1),
      },
      hostIP: '127.0.0.1',
      startTime: t0,
      message: 'log here',
      now: t1,
    });
    expect(status.phase).toBe('Running');
    expect(status.conditions?.map((c) => [c.type, c.status])).toEqual([
      ['PodScheduled', 'True'],
      ['Initialized', 'True'],
      ['ContainersReady', 'True'],
      ['Ready', 'True'],
    ]);
    expect(status.containerStatuses?.[0]).toMatchObject({
      name: 'runner',
      ready: true,
      restartCount: 2,
      containerID: 'vmop://42',
      state: { running: { startedAt: t0 } },
      lastState: { terminated: { exitCode: 1 } },
    });
  });

  it('keeps a condition’s transition time while its status holds', () => {
    const earlier = new Date('2029-12-31T00:00:00Z');
    const previous: V1Pod = {
      ...pod,
      status: { conditions: [{ type: 'Ready', status: 'False', lastTransitionTime: earlier }] },
    };
    const input = { pod: previous, hostIP: '127.0.0.1', startTime: t0, message: '', now: t1 };
    const waiting = podStatus({ ...input, container: base });
    expect(waiting.conditions?.find((c) => c.type === 'Ready')).toMatchObject({
      status: 'False',
      reason: 'ContainersNotReady',
      lastTransitionTime: earlier,
    });
    const running = podStatus({
      ...input,
      container: { ...base, state: { kind: 'running', startedAt: t0, containerID: 'vmop://1' } },
    });
    expect(running.conditions?.find((c) => c.type === 'Ready')?.lastTransitionTime).toEqual(t1);
  });
});
