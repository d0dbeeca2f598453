import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { VirtualMachine, type EvictionStrategy } from '../../../src/api/virtual-machine.js';
import {
  planEviction,
  type EvictionFacts,
} from '../../../src/reconcilers/virtual-machine/migration/eviction.js';
import { nodeFacts } from '../../../src/reconcilers/virtual-machine/node-facts.js';
import { VirtualMachineOperation } from '../../../src/api/virtual-machine-operation.js';
import { evictsLive, refusal } from '../../../src/reconcilers/virtual-machine-operation/operations.js';

const vm = (evictionStrategy?: EvictionStrategy) =>
  VirtualMachine.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachine',
    metadata: { name: 'vm', namespace: 'ns', uid: 'vm-uid' },
    spec: { ...(evictionStrategy && { evictionStrategy }), vm: { state: 'Running', maximumRam: '256Mi' } },
  });
const pod: V1Pod = {
  metadata: { name: 'vm', uid: '0123abcd-0000' },
  spec: { nodeName: 'node-1', containers: [] },
};
const ready = (unschedulable = false) =>
  nodeFacts('node-1', {
    spec: { unschedulable },
    status: { conditions: [{ type: 'Ready', status: 'True' }] },
  });
const can = { migratable: true, reason: 'Migratable', message: 'yes' };
const cannot = { migratable: false, reason: 'NodeLocalMedium', message: 'a CD of its node' };

const plan = (more: Partial<EvictionFacts>) =>
  planEviction({
    vm: vm(),
    pod,
    node: ready(),
    migratable: can,
    defaultStrategy: 'LiveMigrateIfPossible',
    migrating: false,
    otherNodeReady: true,
    ...more,
  });

describe('planEviction', () => {
  it('a VM that can move live somewhere has a budget, so an eviction waits for vmop to move it', () => {
    expect(plan({})).toEqual({ budget: true });
  });

  it('no budget when it cannot move, may not, or no other node could take it: the eviction moves it cold', () => {
    expect(plan({ migratable: cannot })).toEqual({ budget: false });
    expect(plan({ vm: vm('None') })).toEqual({ budget: false });
    expect(plan({ otherNodeReady: false })).toEqual({ budget: false });
  });

  it('LiveMigrate: a budget also while it cannot move (never evicted otherwise), but no evacuation', () => {
    expect(plan({ vm: vm('LiveMigrate'), migratable: cannot, node: ready(true) })).toEqual({ budget: true });
  });

  it('its node cordoned: a Migrate operation of its own, once', () => {
    const evacuate = plan({ node: ready(true) }).evacuate!;
    expect(evacuate.metadata.name).toBe('vm-evacuate-0123abcd');
    expect(evacuate.spec).toEqual({ virtualMachineName: 'vm', type: 'Migrate' });
    expect(plan({ node: ready(true), evacuation: evacuate }).evacuate).toBeUndefined();
    expect(plan({ node: ready(true), migrating: true }).evacuate).toBeUndefined();
  });

  it('if possible: once moving live failed, the budget goes and the drain moves it cold', () => {
    const evacuate = plan({ node: ready(true) }).evacuate!;
    const failed = { ...evacuate, status: { phase: 'Failed' as const } };
    expect(plan({ node: ready(true), evacuation: failed })).toEqual({ budget: false });
    expect(plan({ vm: vm('LiveMigrate'), node: ready(true), evacuation: failed })).toEqual({ budget: true });
  });
});

describe('Evict and Migrate refusals', () => {
  const running = (evictionStrategy?: EvictionStrategy, migratable = false) =>
    VirtualMachine.parse({
      ...vm(evictionStrategy),
      status: {
        phase: 'Running',
        node: 'node-1',
        conditions: [
          {
            type: 'Migratable',
            status: migratable ? 'True' : 'False',
            reason: 'x',
            message: 'the CD /etc/os-release is a file of its node only',
            lastTransitionTime: '2026-11-25T10:00:00Z',
          },
        ],
      },
    });
  const op = (type: 'Evict' | 'Migrate') =>
    VirtualMachineOperation.parse({
      apiVersion: 'vmoperator.jdrupes.org/v1',
      kind: 'VirtualMachineOperation',
      metadata: { name: 'op', namespace: 'ns', uid: 'op-uid' },
      spec: { virtualMachineName: 'vm', type },
    });
  const context = {
    nodes: [ready(), nodeFacts('node-2', { status: { conditions: [{ type: 'Ready', status: 'True' }] } })],
    evictionStrategy: 'LiveMigrateIfPossible' as const,
  };

  it('Evict of a VM that cannot move: moved cold, unless its evictionStrategy is LiveMigrate', () => {
    expect(refusal(op('Evict'), running(), context)).toBeUndefined();
    expect(evictsLive(op('Evict'), running(), context)).toEqual({
      live: false,
      why: 'the CD /etc/os-release is a file of its node only',
    });
    expect(refusal(op('Evict'), running('LiveMigrate'), context)).toMatchObject({ reason: 'NotMigratable' });
  });

  it('Migrate needs another ready node', () => {
    expect(refusal(op('Migrate'), running(undefined, true), context)).toBeUndefined();
    expect(refusal(op('Migrate'), running(undefined, true), { ...context, nodes: [ready()] })).toMatchObject({
      reason: 'NotMigratable',
      message: 'no other node is ready to take the VM (it runs on node-1)',
    });
  });
});
