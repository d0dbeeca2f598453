import { describe, expect, it } from 'vitest';
import { stuckRunnerPodStep } from '../../../../src/reconcilers/virtual-machine/runner-pod/stuck-step.js';
import { callNames, NOW, testVm, vmState } from './vm-state-fixture.js';

const unschedulable = (since: Date) => ({
  metadata: { name: 'vm', namespace: 'ns', uid: 'vm-uid' },
  spec: {
    containers: [],
    volumes: [{ name: 'runner-data', persistentVolumeClaim: { claimName: 'vm-runner-data' } }],
  },
  status: {
    phase: 'Pending',
    conditions: [
      {
        type: 'PodScheduled',
        status: 'False',
        reason: 'Unschedulable',
        message: '0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found',
        lastTransitionTime: since,
      },
    ],
  },
});
const fixture = (since: Date) =>
  vmState({
    vm: testVm({}, { status: { runnerPod: { name: 'vm' } } }),
    seen: {
      pods: { runner: [unschedulable(since)], importer: [], attach: [] },
      claims: [{ metadata: { name: 'vm-runner-data' }, status: { phase: 'Bound' } }],
    },
  });

describe('step: runner pod stuck on bound claims', () => {
  it('makes the pod again once it stayed unschedulable 30 s for claims that are bound, and says so', async () => {
    const { state, calls } = fixture(new Date(NOW.getTime() - 31_000));
    expect(await stuckRunnerPodStep.run(state)).toMatchObject({
      writes: ['Pod vm deleted (unschedulable for claims that are bound)'],
      events: [{ reason: 'RecreatingRunnerPod' }],
    });
    expect(callNames(calls)).toEqual(['core.deleteNamespacedPod']);
  });

  it('gives kube-scheduler its back-off first: looks again when the 30 s are up', async () => {
    const { state, calls } = fixture(new Date(NOW.getTime() - 5_000));
    expect(await stuckRunnerPodStep.run(state)).toEqual({ requeueAfterMs: 25_000 });
    expect(calls).toEqual([]);
  });
});
