import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import { planRunnerPods } from '../../../src/reconcilers/virtual-machine/runner-pods.js';

const vmWith = (state: 'Running' | 'Stopped', runnerPod?: { name: string; uid?: string }) =>
  VirtualMachine.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachine',
    metadata: { name: 'vm', namespace: 'ns', uid: 'vm-uid' },
    spec: { vm: { state, maximumRam: '256Mi' } },
    ...(runnerPod && { status: { runnerPod } }),
  });
const pod = (name: string, deleting = false): V1Pod => ({
  metadata: { name, uid: `${name}-uid`, ...(deleting && { deletionTimestamp: new Date() }) },
});
const names = (pods: V1Pod[]) => pods.map((p) => p.metadata!.name);

describe('planRunnerPods', () => {
  it('makes the pod named after the VM when a running VM has none', () => {
    expect(planRunnerPods({ vm: vmWith('Running'), pods: [] })).toEqual({ stop: [], create: 'vm' });
  });

  it('makes nothing while the VM has a pod that runs', () => {
    const plan = planRunnerPods({ vm: vmWith('Running', { name: 'vm' }), pods: [pod('vm')] });
    expect(plan).toEqual({ current: pod('vm'), stop: [] });
  });

  it('looks a pod up that the status names and the cache lacks, before it makes one', () => {
    const vm = vmWith('Running', { name: 'vm-ab12c', uid: 'x' });
    expect(planRunnerPods({ vm, pods: [] })).toEqual({ stop: [], verify: 'vm-ab12c' });
    expect(planRunnerPods({ vm, pods: [], absent: new Set(['vm-ab12c']) })).toEqual({
      stop: [],
      create: 'vm',
    });
  });

  it('never makes a pod while one of the VM is still being deleted (a VM never runs twice)', () => {
    const plan = planRunnerPods({ vm: vmWith('Running', { name: 'vm' }), pods: [pod('vm', true)] });
    expect(plan.create).toBeUndefined();
    expect(plan.waiting).toMatch(/runner pod vm is shutting down/);
    expect(plan.current).toEqual(pod('vm', true)); // its state is the VM's status meanwhile
  });

  it('stops every pod of a VM to be stopped, but those being deleted already', () => {
    const plan = planRunnerPods({
      vm: vmWith('Stopped', { name: 'vm' }),
      pods: [pod('vm'), pod('vm-x', true)],
    });
    expect(names(plan.stop)).toEqual(['vm']);
    expect(plan.create).toBeUndefined();
  });

  it("takes the VM's one pod as current when the status names none (vmop 0.1's <vm>-0)", () => {
    const plan = planRunnerPods({ vm: vmWith('Running'), pods: [pod('vm-0')] });
    expect(plan.current).toEqual(pod('vm-0'));
    expect(plan.create).toBeUndefined();
  });

  it('prefers the pod the status names when there are two (a migration target beside it)', () => {
    const plan = planRunnerPods({
      vm: vmWith('Running', { name: 'vm-m1' }),
      pods: [pod('vm'), pod('vm-m1')],
    });
    expect(plan.current).toEqual(pod('vm-m1'));
  });
});
