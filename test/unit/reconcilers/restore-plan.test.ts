import type { V1PersistentVolumeClaim, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import { VirtualMachineRestore, type RestoreStatus } from '../../../src/api/virtual-machine-restore.js';
import { VirtualMachineSnapshot } from '../../../src/api/virtual-machine-snapshot.js';
import { planRestore, type RestoreInput } from '../../../src/reconcilers/virtual-machine-restore/plan.js';
import { importerPod } from '../../../src/reconcilers/virtual-machine/disks/importer-pod.js';
import { restoreLabels, vmLabels } from '../../../src/reconcilers/virtual-machine/naming.js';

const NOW = new Date('2026-11-29T21:00:00Z');

const vm = (state = 'Stopped') =>
  VirtualMachine.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachine',
    metadata: { name: 'vm', namespace: 'ns', uid: 'vm-uid' },
    spec: {
      vm: {
        state,
        disks: [
          {
            volumeClaimTemplate: {
              metadata: { name: 'system' },
              spec: { resources: { requests: { storage: '1Gi' } } },
            },
          },
        ],
      },
    },
  });

const vmClaims = ['vm-runner-data', 'vm-system-disk'].map(
  (name) => ({ metadata: { name, namespace: 'ns', labels: vmLabels('vm') } }) as V1PersistentVolumeClaim,
);

const snapshot = (phase = 'Ready', of = 'vm') =>
  VirtualMachineSnapshot.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachineSnapshot',
    metadata: { name: 'daily', namespace: 'ns' },
    spec: { virtualMachineName: of },
    status: {
      phase,
      volumes: [
        {
          name: 'runner-data',
          claimName: 'vm-runner-data',
          copyClaimName: 'daily-runner-data',
          volumeMode: 'Filesystem',
        },
        {
          name: 'system-disk',
          claimName: 'vm-system-disk',
          copyClaimName: 'daily-system-disk',
          volumeMode: 'Block',
        },
        { name: 'old-disk', claimName: 'vm-old-disk', copyClaimName: 'daily-old-disk', volumeMode: 'Block' },
      ],
    },
  });

const restore = (status?: RestoreStatus, stopVirtualMachine = false) =>
  VirtualMachineRestore.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachineRestore',
    metadata: { name: 'back', namespace: 'ns', uid: 'restore-uid' },
    spec: { virtualMachineName: 'vm', virtualMachineSnapshotName: 'daily', stopVirtualMachine },
    ...(status && { status }),
  });

const runnerPod = { metadata: { name: 'vm-abcde', namespace: 'ns', labels: vmLabels('vm') } } as V1Pod;

const input = (overrides: Partial<RestoreInput> = {}): RestoreInput => ({
  restore: restore(),
  vm: vm(),
  snapshot: snapshot(),
  vmClaims,
  vmPods: [],
  copyPods: [],
  now: NOW,
  ...overrides,
});

const started = () => planRestore(input()).status;

function copyPod(volume: string, phase: string, outcome: object): V1Pod {
  const disk = planRestore(input({ restore: restore(started()) })).startCopies.find(
    (d) => d.volume === volume,
  )!;
  const pod = importerPod(
    {
      podName: `back-restore-${volume}`,
      namespace: 'ns',
      labels: restoreLabels('back'),
      ownerReference: { apiVersion: 'v1', kind: 'X', name: 'back', uid: 'restore-uid' },
    },
    disk,
    { image: 'runner:1' },
  );
  pod.status = {
    phase,
    containerStatuses: [
      {
        name: 'importer',
        image: '',
        imageID: '',
        ready: false,
        restartCount: 0,
        state: { terminated: { exitCode: 0, message: JSON.stringify(outcome) } },
      },
    ],
  };
  return pod;
}

describe('a VM restore', () => {
  it('waits for its snapshot to be Ready and its VM to stop, and refuses a snapshot of another VM', () => {
    expect(planRestore(input({ snapshot: undefined })).status).toEqual({
      phase: 'Pending',
      message: 'VirtualMachineSnapshot daily does not exist',
    });
    expect(planRestore(input({ snapshot: snapshot('InProgress') })).status.message).toBe(
      'snapshot daily is not Ready yet (InProgress)',
    );
    expect(planRestore(input({ snapshot: snapshot('Ready', 'other') })).status).toEqual({
      phase: 'Failed',
      message: 'snapshot daily is of VM other, not of vm',
    });
    const waiting = planRestore(input({ vm: vm('Running'), vmPods: [runnerPod] }));
    expect(waiting.status.message).toMatch(/^the VM runs: a restore overwrites its disks/);
    expect(waiting.vmState).toBeUndefined();
  });

  it('stops a running VM when asked, saying so, and starts it again once restored', () => {
    const stopping = planRestore(
      input({ restore: restore(undefined, true), vm: vm('Running'), vmPods: [runnerPod] }),
    );
    expect(stopping.vmState).toBe('Stopped');
    expect(stopping.status).toMatchObject({
      phase: 'Pending',
      stoppedVirtualMachine: true,
      message: 'stopping the VM to restore it; it is started again once restored',
    });
    const cut = planRestore(input({ restore: restore(stopping.status, true) })).status;
    const ok = { result: 'Succeeded', reason: 'Imported', message: 'copied' };
    const done = planRestore(
      input({
        restore: restore(cut, true),
        copyPods: [copyPod('runner-data', 'Succeeded', ok), copyPod('system-disk', 'Succeeded', ok)],
      }),
    );
    expect(done.status).toMatchObject({ phase: 'Completed', completedAt: NOW.toISOString() });
    expect(done.status.message).toMatch(/; the VM is started again$/);
    expect(done.vmState).toBe('Running');
  });

  it("writes each copy back onto the VM's claim of that volume, leaving out volumes the VM no longer has", () => {
    const status = started();
    expect(status).toMatchObject({
      phase: 'InProgress',
      message: 'writing back runner-data, system-disk (the VM has no old-disk any more: left out)',
    });
    const plan = planRestore(input({ restore: restore(status) }));
    expect(
      plan.startCopies.map((disk) => [disk.volume, disk.claimName, disk.source, disk.filesystem]),
    ).toEqual([
      ['runner-data', 'vm-runner-data', { pvc: { name: 'daily-runner-data' } }, true],
      ['system-disk', 'vm-system-disk', { pvc: { name: 'daily-system-disk' } }, false],
    ]);
  });

  it('fails when a copy fails or the VM is started meanwhile, and does not start the VM then', () => {
    const failed = planRestore(
      input({
        restore: restore({ ...started(), stoppedVirtualMachine: true }, true),
        copyPods: [
          copyPod('system-disk', 'Failed', { result: 'Failed', reason: 'TooLarge', message: 'no room' }),
        ],
      }),
    );
    expect(failed.status).toMatchObject({
      phase: 'Failed',
      message: 'restoring failed: system-disk: TooLarge: no room',
    });
    expect(failed.vmState).toBeUndefined();
    expect(planRestore(input({ restore: restore(started()), vmPods: [runnerPod] })).status).toMatchObject({
      phase: 'Failed',
      message: expect.stringContaining('pod vm-abcde took the VM'),
    });
  });
});
