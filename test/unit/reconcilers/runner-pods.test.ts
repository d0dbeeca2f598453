import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import { nodeFacts } from '../../../src/reconcilers/virtual-machine/node-facts.js';
import {
  planRunnerPods,
  type RunnerPodFacts,
} from '../../../src/reconcilers/virtual-machine/runner-pod/plan.js';

const readyNode = { status: { conditions: [{ type: 'Ready', status: 'True' }] } };
/** Every node is up, unless `nodes` says otherwise. */
const plan = (facts: Omit<RunnerPodFacts, 'node'>, nodes: Record<string, object | undefined> = {}) =>
  planRunnerPods({ ...facts, node: (name) => nodeFacts(name, name in nodes ? nodes[name] : readyNode) });

const vmWith = (state: 'Running' | 'Stopped', runnerPod?: { name: string; uid?: string }) =>
  VirtualMachine.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachine',
    metadata: { name: 'vm', namespace: 'ns', uid: 'vm-uid' },
    spec: { vm: { state, maximumRam: '256Mi' } },
    ...(runnerPod && { status: { runnerPod } }),
  });
const pod = (name: string, deleting = false): V1Pod => ({
  metadata: {
    name,
    uid: `${name}-uid`,
    ...(deleting && { deletionTimestamp: new Date('2026-11-25T10:00:00Z') }),
  },
});
const names = (pods: V1Pod[]) => pods.map((p) => p.metadata!.name);

describe('planRunnerPods', () => {
  it('makes the pod named after the VM when a running VM has none', () => {
    expect(plan({ vm: vmWith('Running'), pods: [] })).toEqual({ stop: [], create: 'vm' });
  });

  it('makes nothing while the VM has a pod that runs', () => {
    const planned = plan({ vm: vmWith('Running', { name: 'vm' }), pods: [pod('vm')] });
    expect(planned).toEqual({ current: pod('vm'), stop: [] });
  });

  it('looks a pod up that the status names and the cache lacks, before it makes one', () => {
    const vm = vmWith('Running', { name: 'vm-ab12c', uid: 'x' });
    expect(plan({ vm, pods: [] })).toEqual({ stop: [], verify: 'vm-ab12c' });
    expect(plan({ vm, pods: [], absent: new Set(['vm-ab12c']) })).toEqual({
      stop: [],
      create: 'vm',
    });
  });

  it('never makes a pod while one of the VM is still being deleted (a VM never runs twice)', () => {
    const planned = plan({ vm: vmWith('Running', { name: 'vm' }), pods: [pod('vm', true)] });
    expect(planned.create).toBeUndefined();
    expect(planned.waiting).toMatch(/runner pod vm is shutting down/);
    expect(planned.current).toEqual(pod('vm', true)); // its state is the VM's status meanwhile
  });

  it('stops every pod of a VM to be stopped, but those being deleted already', () => {
    const planned = plan({
      vm: vmWith('Stopped', { name: 'vm' }),
      pods: [pod('vm'), pod('vm-x', true)],
    });
    expect(names(planned.stop)).toEqual(['vm']);
    expect(planned.create).toBeUndefined();
  });

  it("takes the VM's one pod as current when the status names none (vmop 0.1's <vm>-0)", () => {
    const planned = plan({ vm: vmWith('Running'), pods: [pod('vm-0')] });
    expect(planned.current).toEqual(pod('vm-0'));
    expect(planned.create).toBeUndefined();
  });

  it('prefers the pod the status names when there are two (a migration target beside it)', () => {
    const planned = plan({
      vm: vmWith('Running', { name: 'vm-m1' }),
      pods: [pod('vm'), pod('vm-m1')],
    });
    expect(planned.current).toEqual(pod('vm-m1'));
  });

  it('keeps a pod whose node stopped reporting (it may still run the VM), and makes no other', () => {
    const onLost = { ...pod('vm'), spec: { nodeName: 'n2', containers: [] } };
    const notReady = { status: { conditions: [{ type: 'Ready', status: 'Unknown' }] } };
    const planned = plan({ vm: vmWith('Running', { name: 'vm' }), pods: [onLost] }, { n2: notReady });
    expect(planned).toEqual({ current: onLost, stop: [] });
  });

  it('removes the pod of a node gone for sure (deleted, or down and out of service) before anything else', () => {
    const onLost = { ...pod('vm'), spec: { nodeName: 'n2', containers: [] } };
    const outOfService = {
      spec: { taints: [{ key: 'node.kubernetes.io/out-of-service', effect: 'NoExecute' }] },
      status: { conditions: [{ type: 'Ready', status: 'Unknown' }] },
    };
    for (const n2 of [undefined, outOfService]) {
      const planned = plan({ vm: vmWith('Running', { name: 'vm' }), pods: [onLost] }, { n2 });
      expect(planned.forget).toEqual([onLost]);
      expect(planned.create).toBeUndefined();
    }
    // Tainted but up again: it runs there, so it stays.
    const back = { ...outOfService, status: { conditions: [{ type: 'Ready', status: 'True' }] } };
    expect(
      plan({ vm: vmWith('Running', { name: 'vm' }), pods: [onLost] }, { n2: back }).forget,
    ).toBeUndefined();
  });
});
