import type { V1PersistentVolumeClaim, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import { VirtualMachineExport, type ExportStatus } from '../../../src/api/virtual-machine-export.js';
import { VirtualMachineSnapshot } from '../../../src/api/virtual-machine-snapshot.js';
import { planExport, type ExportInput } from '../../../src/reconcilers/virtual-machine-export/plan.js';
import { exportServerPod } from '../../../src/reconcilers/virtual-machine-export/server-pod.js';
import { vmLabels } from '../../../src/reconcilers/virtual-machine/naming.js';

const CREATED = '2026-11-30T10:00:00Z';
const NOW = new Date('2026-11-30T10:01:00Z');
const IMAGE = { image: 'localhost/vmop-runner:test' };

const vm = (state = 'Stopped') =>
  VirtualMachine.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachine',
    metadata: { name: 'vm', namespace: 'ns', uid: 'vm-uid' },
    spec: {
      vm: {
        state,
        disks: ['system', 'data'].map((name) => ({
          volumeClaimTemplate: { metadata: { name }, spec: { resources: { requests: { storage: '1Gi' } } } },
        })),
      },
    },
  });

const claim = (name: string, volumeMode: string) =>
  ({
    metadata: { name, namespace: 'ns', labels: vmLabels('vm') },
    spec: { volumeMode, resources: { requests: { storage: '1Gi' } } },
  }) as V1PersistentVolumeClaim;
const vmClaims = [
  claim('vm-runner-data', 'Filesystem'),
  claim('vm-system-disk', 'Block'),
  claim('vm-data-disk', 'Block'),
];

const snapshot = (phase: string) =>
  VirtualMachineSnapshot.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachineSnapshot',
    metadata: { name: 'daily', namespace: 'ns' },
    spec: { virtualMachineName: 'vm' },
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
      ],
    },
  });

const vmExport = (spec: object, status?: ExportStatus) =>
  VirtualMachineExport.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachineExport',
    metadata: { name: 'out', namespace: 'ns', uid: 'export-uid', creationTimestamp: CREATED },
    spec,
    ...(status && { status }),
  });

const ofVm = (extra: object = {}) => vmExport({ source: { virtualMachineName: 'vm' }, ttl: '1h', ...extra });

const input = (overrides: Partial<ExportInput> = {}): ExportInput => ({
  vmExport: ofVm(),
  vm: vm(),
  vmClaims,
  vmPods: [],
  now: NOW,
  ...overrides,
});

/** The server pod the plan asks for, as the apiserver would show it in `phase`, ready or not. */
function serverPod(plan: ReturnType<typeof planExport>, phase: string, ready: boolean): V1Pod {
  const pod = exportServerPod(ofVm(), plan.serve!, plan.expiresAt, IMAGE);
  pod.metadata!.uid = 'pod-uid';
  pod.status = { phase, conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }] };
  return pod;
}

describe('planExport', () => {
  it("serves a stopped VM's disks (not its runner data) from their claims, read-only, until creation + ttl", () => {
    const plan = planExport(input());
    expect(plan.serve).toEqual([
      { name: 'system', claimName: 'vm-system-disk' },
      { name: 'data', claimName: 'vm-data-disk' },
    ]);
    expect(plan.status).toMatchObject({ phase: 'Pending', message: 'the export server starts' });
    expect(plan.expiresAt.toISOString()).toBe('2026-11-30T11:00:00.000Z');
    const pod = serverPod(plan, 'Pending', false);
    expect(
      pod.spec!.volumes!.filter((v) => v.persistentVolumeClaim).map((v) => v.persistentVolumeClaim),
    ).toEqual([
      { claimName: 'vm-system-disk', readOnly: true },
      { claimName: 'vm-data-disk', readOnly: true },
    ]);
    expect(pod.spec!.containers[0]!.args).toContain('2026-11-30T11:00:00.000Z');
    expect(pod.spec!.automountServiceAccountToken).toBe(false);
  });

  it('is Ready once its server pod is, with a URL per disk and format', () => {
    const first = planExport(input());
    expect(planExport(input({ serverPod: serverPod(first, 'Running', false) })).status.phase).toBe('Pending');
    const plan = planExport(input({ serverPod: serverPod(first, 'Running', true) }));
    expect(plan.serve).toBeUndefined();
    expect(plan.status.phase).toBe('Ready');
    expect(plan.status.disks![0]!.urls).toEqual({
      qcow2: 'https://out-export.ns.svc:8443/disks/system.qcow2',
      raw: 'https://out-export.ns.svc:8443/disks/system.raw',
    });
  });

  it('waits while the VM runs, and takes its server away when the VM starts', () => {
    const running = planExport(input({ vm: vm('Running') }));
    expect(running.serve).toBeUndefined();
    expect(running.status.phase).toBe('Pending');
    expect(running.status.message).toContain('export a snapshot of a running VM');
    const pod = serverPod(planExport(input()), 'Running', true);
    const started = planExport(input({ vm: vm('Running'), serverPod: pod }));
    expect(started.deleteServerPod).toBe(pod);
    expect(started.status.phase).toBe('Pending');
    const runnerPod = { metadata: { name: 'vm-abcde', namespace: 'ns', labels: vmLabels('vm') } } as V1Pod;
    expect(planExport(input({ vmPods: [runnerPod] })).status.message).toContain('(pod vm-abcde)');
    // Stopping: its pod terminates, and its guest may still write until the pod is gone.
    const terminating = {
      ...runnerPod,
      metadata: { ...runnerPod.metadata, deletionTimestamp: new Date() },
      status: { phase: 'Running' },
    } as V1Pod;
    const stopping = planExport(input({ vmPods: [terminating] }));
    expect(stopping.serve).toBeUndefined();
    expect(stopping.status.message).toContain('(pod vm-abcde)');
    const ended = { ...runnerPod, status: { phase: 'Succeeded' } } as V1Pod;
    expect(planExport(input({ vmPods: [ended] })).serve).toBeDefined();
  });

  it("serves a Ready snapshot's copies, and waits for one that is not Ready yet", () => {
    const source = { vmExport: vmExport({ source: { virtualMachineSnapshotName: 'daily' } }), vm: undefined };
    const pending = planExport(input({ ...source, snapshot: snapshot('InProgress') }));
    expect(pending.status).toMatchObject({ phase: 'Pending', message: 'snapshot daily is InProgress' });
    expect(planExport(input({ ...source, snapshot: snapshot('Ready') })).serve).toEqual([
      { name: 'system', claimName: 'daily-system-disk' },
    ]);
    expect(planExport(input({ ...source, snapshot: snapshot('Failed') })).status).toMatchObject({
      phase: 'Failed',
      message: 'snapshot daily failed',
    });
  });

  it('fails, naming the disks there are, for a disk the source does not have', () => {
    const plan = planExport(input({ vmExport: ofVm({ disks: ['system', 'backup'] }) }));
    expect(plan.serve).toBeUndefined();
    expect(plan.status).toMatchObject({
      phase: 'Failed',
      message: 'no disk named backup: there are system, data',
    });
  });

  it("fails with the server's last words when its pod failed", () => {
    const pod = serverPod(planExport(input()), 'Failed', false);
    pod.status!.containerStatuses = [
      {
        name: 'server',
        image: '',
        imageID: '',
        ready: false,
        restartCount: 0,
        state: { terminated: { exitCode: 1, message: 'qemu-img: No space left on device' } },
      },
    ] as never;
    const plan = planExport(input({ serverPod: pod }));
    expect(plan.status).toMatchObject({
      phase: 'Failed',
      message: 'the export server failed: qemu-img: No space left on device',
    });
    expect(plan.deleteServerPod).toBe(pod);
  });

  it('expires at creation + ttl: its server goes', () => {
    const pod = serverPod(planExport(input()), 'Running', true);
    const plan = planExport(input({ serverPod: pod, now: new Date('2026-11-30T11:00:00Z') }));
    expect(plan.status.phase).toBe('Expired');
    expect(plan.tearDown).toBe(true);
    expect(plan.serve).toBeUndefined();
  });
});
