import { describe, expect, it } from 'vitest';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import { VirtualMachineClone } from '../../../src/api/virtual-machine-clone.js';
import { VirtualMachineSnapshot } from '../../../src/api/virtual-machine-snapshot.js';
import {
  CLONED_BY_ANNOTATION,
  CLONED_FROM_ANNOTATION,
  planClone,
} from '../../../src/reconcilers/virtual-machine-clone/plan.js';

const NOW = new Date('2026-11-29T21:30:00Z');

const original = VirtualMachine.parse({
  apiVersion: 'vmoperator.jdrupes.org/v1',
  kind: 'VirtualMachine',
  metadata: { name: 'web', namespace: 'ns' },
  spec: {
    pools: ['students'],
    cloudInit: { metaData: { 'local-hostname': 'web' }, userData: { packages: ['nginx'] } },
    vm: {
      state: 'Stopped',
      machineUuid: '5d1c4f7e-0000-4000-8000-000000000001',
      virtualMachineIPAddressName: 'web-address',
      networks: [{ tap: { mac: '02:00:00:00:00:01' } }, { user: {} }],
      disks: [
        {
          volumeClaimTemplate: {
            metadata: { name: 'system' },
            spec: { resources: { requests: { storage: '1Gi' } } },
          },
          source: { http: { url: 'http://images.example/debian.qcow2' } },
        },
        { cdrom: { image: 'installer.iso' } },
      ],
    },
  },
});

const snapshot = (phase = 'Ready') =>
  VirtualMachineSnapshot.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachineSnapshot',
    metadata: { name: 'daily', namespace: 'ns' },
    spec: { virtualMachineName: 'web' },
    status: {
      phase,
      volumes: [
        {
          name: 'runner-data',
          claimName: 'web-runner-data',
          copyClaimName: 'daily-runner-data',
          volumeMode: 'Filesystem',
        },
        {
          name: 'system-disk',
          claimName: 'web-system-disk',
          copyClaimName: 'daily-system-disk',
          volumeMode: 'Block',
        },
      ],
      virtualMachine: { labels: { app: 'web' }, spec: original.spec as Record<string, unknown> },
    },
  });

const clone = (state?: 'Running') =>
  VirtualMachineClone.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachineClone',
    metadata: { name: 'c1', namespace: 'ns', uid: 'clone-uid' },
    spec: { virtualMachineSnapshotName: 'daily', newVirtualMachineName: 'web-2', ...(state && { state }) },
  });

describe('a VM clone', () => {
  it("makes the new VM from the snapshot's spec and labels, its disks filled from the snapshot's copies", () => {
    const plan = planClone({ clone: clone('Running'), snapshot: snapshot(), now: NOW });
    expect(plan.status).toMatchObject({ phase: 'Completed', completedAt: NOW.toISOString() });
    const vm = VirtualMachine.parse(plan.create);
    expect(vm.metadata).toMatchObject({
      name: 'web-2',
      namespace: 'ns',
      labels: { app: 'web' },
      annotations: { [CLONED_BY_ANNOTATION]: 'clone-uid', [CLONED_FROM_ANNOTATION]: 'daily' },
    });
    expect(vm.spec.vm.disks![0]!.source).toEqual({ pvc: { name: 'daily-system-disk' } });
    expect(vm.spec.vm.disks![1]).toEqual(original.spec.vm.disks![1]); // a CD stays what it was
    expect(vm.spec.vm.state).toBe('Running');
    expect(vm.spec.vm.cpuTopology).toEqual(original.spec.vm.cpuTopology);
  });

  it('gives the new VM an identity of its own: no MAC, machine UUID, address or pool of the original, its own hostname', () => {
    const vm = VirtualMachine.parse(planClone({ clone: clone(), snapshot: snapshot(), now: NOW }).create);
    expect(vm.spec.vm.networks![0]!.tap).not.toHaveProperty('mac');
    expect(vm.spec.vm.networks![1]).toEqual(original.spec.vm.networks![1]);
    expect(vm.spec.vm).not.toHaveProperty('machineUuid');
    expect(vm.spec.vm).not.toHaveProperty('virtualMachineIPAddressName');
    expect(vm.spec.pools).toEqual([]);
    expect(vm.spec.cloudInit?.metaData).toEqual({ 'local-hostname': 'web-2' });
    expect(vm.spec.vm.state).toBe('Stopped'); // as the snapshot recorded it
  });

  it('waits for a snapshot that is not Ready, fails for a failed one or a name taken, and knows a VM it made', () => {
    expect(planClone({ clone: clone(), snapshot: snapshot('InProgress'), now: NOW }).status).toEqual({
      phase: 'Pending',
      message: 'snapshot daily is not Ready yet (InProgress)',
    });
    expect(planClone({ clone: clone(), now: NOW }).status.message).toBe(
      'VirtualMachineSnapshot daily does not exist',
    );
    expect(planClone({ clone: clone(), snapshot: snapshot('Failed'), now: NOW }).status.phase).toBe('Failed');
    const taken = planClone({
      clone: clone(),
      snapshot: snapshot(),
      existing: { metadata: { name: 'web-2' } },
      now: NOW,
    });
    expect(taken).toEqual({
      status: { phase: 'Failed', message: 'a VirtualMachine web-2 exists already' },
      secrets: [],
    });
    const made = planClone({
      clone: clone(),
      snapshot: snapshot(),
      existing: { metadata: { name: 'web-2', annotations: { [CLONED_BY_ANNOTATION]: 'clone-uid' } } },
      now: NOW,
    });
    expect(made.status.phase).toBe('Completed');
    expect(made.create).toBeUndefined();
  });

  it("gives the new VM its own copies of the snapshot's cloud-init and sysprep Secrets", () => {
    const withSecrets = snapshot();
    withSecrets.status!.virtualMachine = {
      spec: {
        ...(original.spec as Record<string, unknown>),
        cloudInit: { secretRef: { name: 'web-cloud-init' } },
        sysprep: { secretRef: { name: 'web-unattend' } },
      },
      secrets: [
        { field: 'cloudInit', name: 'web-cloud-init', copyName: 'daily-cloud-init' },
        { field: 'sysprep', name: 'web-unattend', copyName: 'daily-sysprep' },
      ],
    };
    const plan = planClone({ clone: clone(), snapshot: withSecrets, now: NOW });
    expect(plan.secrets).toEqual([
      { from: 'daily-cloud-init', to: 'web-2-cloud-init' },
      { from: 'daily-sysprep', to: 'web-2-sysprep' },
    ]);
    const vm = VirtualMachine.parse(plan.create);
    expect(vm.spec.cloudInit?.secretRef).toEqual({ name: 'web-2-cloud-init' });
    expect(vm.spec.sysprep?.secretRef).toEqual({ name: 'web-2-sysprep' });
  });
});
