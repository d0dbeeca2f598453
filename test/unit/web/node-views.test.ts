// The GUI's nodes page: each node with what it offers and what the VMs placed on it hold.
import type { V1Node } from '@kubernetes/client-node';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import { trimForCache } from '../../../src/kube/object-cache.js';
import { nodeViews } from '../../../src/web/views.js';

const vm = (name: string, status: Record<string, unknown>) =>
  VirtualMachine.parse({
    ...parse(readFileSync('test/fixtures/vm-operator/dev-example-test-vm01.yaml', 'utf8')),
    metadata: { name, namespace: 'team-a' },
    status,
  });

const node = (name: string, more: { ready?: string; unschedulable?: boolean; allocatable?: object }) => {
  const object: V1Node = {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name },
    spec: { unschedulable: more.unschedulable },
    status: {
      conditions: [{ type: 'Ready', status: more.ready ?? 'True' }],
      allocatable: { cpu: '2', memory: '24592812Ki', pods: '110', ...more.allocatable },
      images: [{ names: ['a-large-list'], sizeBytes: 1 }],
    },
  };
  trimForCache(object); // as the managers' cache holds it
  return object;
};

describe("the GUI's nodes", () => {
  it('sums what the VMs placed on a node hold, and leaves stopped ones out', () => {
    const views = nodeViews(
      [
        node('node-2', { ready: 'False', unschedulable: true, allocatable: { cpu: '1900m' } }),
        node('node-1', { allocatable: { 'devices.vmop.jdrupes.org/kvm': '10' } }),
      ],
      [
        vm('db', { phase: 'Running', node: 'node-1', cpus: 2, ram: '1Gi' }),
        vm('web', { phase: 'Starting', node: 'node-1', cpus: 1, ram: '512Mi' }),
        vm('old', { phase: 'Stopped', node: 'node-1', cpus: 0, ram: '0' }),
        vm('moved', { phase: 'Running', node: 'node-2', cpus: 4, ram: '2G' }),
        vm('new', {}),
      ],
    );
    expect(views).toEqual([
      {
        name: 'node-1',
        ready: true,
        schedulable: true,
        cpus: 2,
        ramBytes: 24592812 * 1024,
        vmSlots: 10,
        vms: 2,
        running: 1,
        cpusHeld: 3,
        ramHeldBytes: 1.5 * 1024 ** 3,
      },
      {
        name: 'node-2',
        ready: false,
        schedulable: false,
        cpus: 1.9,
        ramBytes: 24592812 * 1024,
        vms: 1,
        running: 1,
        cpusHeld: 4,
        ramHeldBytes: 2e9,
      },
    ]);
  });
});
