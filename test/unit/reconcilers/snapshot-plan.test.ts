import type { V1PersistentVolumeClaim, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { VirtualMachine } from '../../../src/api/virtual-machine.js';
import { VirtualMachineSnapshot, type SnapshotStatus } from '../../../src/api/virtual-machine-snapshot.js';
import { planSnapshot, type SnapshotInput } from '../../../src/reconcilers/virtual-machine-snapshot/plan.js';
import { importerPod } from '../../../src/reconcilers/virtual-machine/disks/importer-pod.js';
import {
  IMPORTED_ANNOTATION,
  LABEL_SNAPSHOT,
  vmLabels,
} from '../../../src/reconcilers/virtual-machine/naming.js';

const NOW = new Date('2026-11-29T20:00:00Z');

const vm = VirtualMachine.parse({
  apiVersion: 'vmoperator.jdrupes.org/v1',
  kind: 'VirtualMachine',
  metadata: {
    name: 'vm',
    namespace: 'ns',
    uid: 'vm-uid',
    labels: { team: 'a' },
    annotations: { 'kubectl.kubernetes.io/last-applied-configuration': '{"huge":true}', note: 'kept' },
  },
  spec: {
    vm: {
      state: 'Stopped',
      disks: [
        {
          volumeClaimTemplate: {
            metadata: { name: 'system' },
            spec: { resources: { requests: { storage: '1Gi' } } },
          },
        },
        { cdrom: { image: '' } },
      ],
    },
  },
  status: { ipAddress: '10.66.10.7' },
});

function vmClaim(name: string, mode: 'Block' | 'Filesystem', size: string): V1PersistentVolumeClaim {
  return {
    metadata: { name, namespace: 'ns', labels: vmLabels('vm') },
    spec: { volumeMode: mode, storageClassName: 'local', resources: { requests: { storage: size } } },
    status: { phase: 'Bound', capacity: { storage: size } },
  };
}
const vmClaims = [vmClaim('vm-runner-data', 'Filesystem', '1Mi'), vmClaim('vm-system-disk', 'Block', '1Gi')];

const snapshot = (status?: SnapshotStatus) =>
  VirtualMachineSnapshot.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachineSnapshot',
    metadata: { name: 'snap', namespace: 'ns', uid: 'snap-uid', generation: 1 },
    spec: { virtualMachineName: 'vm' },
    ...(status && { status }),
  });

const runnerPod = { metadata: { name: 'vm-abcde', namespace: 'ns', labels: vmLabels('vm') } } as V1Pod;

const input = (overrides: Partial<SnapshotInput> = {}): SnapshotInput => ({
  snapshot: snapshot(),
  vm,
  vmClaims,
  vmPods: [],
  copyClaims: [],
  copyPods: [],
  now: NOW,
  ...overrides,
});

/** The status a stopped VM's cut gives. */
const cutStatus = () => planSnapshot(input()).status;

/** The snapshot's copy claims as the apiserver has them: bound, and marked copied when `copied`. */
function copyClaims(copied: boolean): V1PersistentVolumeClaim[] {
  const plan = planSnapshot(input({ snapshot: snapshot(cutStatus()) }));
  return plan.copies!.imports.createClaims.map((claim) => ({
    ...claim.desired,
    metadata: {
      ...claim.desired.metadata,
      annotations: {
        ...claim.desired.metadata!.annotations,
        ...(copied && { [IMPORTED_ANNOTATION]: 'digest' }),
      },
    },
    status: { phase: 'Bound' },
  }));
}

/** A copying pod of `volume` that ended in `phase` with `outcome` as its termination message. */
function copyPod(volume: string, phase: string, outcome?: object): V1Pod {
  const plan = planSnapshot(input({ snapshot: snapshot(cutStatus()), copyClaims: copyClaims(false) }));
  const disk = plan.copies!.disks.find((d) => d.volume === volume)!;
  const pod = importerPod(
    {
      podName: `snap-copy-${volume}`,
      namespace: 'ns',
      labels: { [LABEL_SNAPSHOT]: 'snap' },
      ownerReference: { apiVersion: 'v1', kind: 'X', name: 'snap', uid: 'snap-uid' },
    },
    disk,
    { image: 'runner:1' },
  );
  pod.metadata!.uid = `${volume}-uid`;
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

describe('a VM snapshot', () => {
  it('waits while the VM starts or does not exist, saying why', () => {
    expect(planSnapshot(input({ vmPods: [runnerPod] })).status).toMatchObject({
      phase: 'Pending',
      message: 'the VM is starting: the snapshot is taken once it runs or has stopped',
    });
    expect(planSnapshot(input({ vm: undefined })).status).toEqual({
      phase: 'Pending',
      message: 'VirtualMachine vm does not exist',
    });
  });

  it('of a stopped VM: the cut records its volumes, spec, labels, annotations and address, and copies nothing yet', () => {
    const plan = planSnapshot(input());
    expect(plan.copies).toBeUndefined();
    expect(plan.status).toMatchObject({
      phase: 'InProgress',
      consistency: 'Stopped',
      cutAt: NOW.toISOString(),
      size: '1025Mi',
      volumes: [
        {
          name: 'runner-data',
          claimName: 'vm-runner-data',
          copyClaimName: 'snap-runner-data',
          volumeMode: 'Filesystem',
          size: '1Mi',
          storageClassName: 'local',
          phase: 'Copying',
        },
        {
          name: 'system-disk',
          claimName: 'vm-system-disk',
          copyClaimName: 'snap-system-disk',
          volumeMode: 'Block',
          size: '1Gi',
          phase: 'Copying',
        },
      ],
      virtualMachine: {
        uid: 'vm-uid',
        labels: { team: 'a' },
        annotations: { note: 'kept' }, // not kubectl's copy of the whole object
        spec: vm.spec,
        ipAddress: '10.66.10.7',
      },
    });
  });

  it("records the VM's cloud-init and sysprep Secrets with the names of the snapshot's copies", () => {
    const provisioned = VirtualMachine.parse({
      ...vm,
      spec: {
        ...vm.spec,
        cloudInit: { secretRef: { name: 'vm-user-data' } },
        sysprep: { secretRef: { name: 'vm-unattend' } },
      },
    });
    expect(planSnapshot(input({ vm: provisioned })).status.virtualMachine?.secrets).toEqual([
      { field: 'cloudInit', name: 'vm-user-data', copyName: 'snap-cloud-init' },
      { field: 'sysprep', name: 'vm-unattend', copyName: 'snap-sysprep' },
    ]);
    expect(cutStatus().virtualMachine).not.toHaveProperty('secrets');
  });

  it('copies each volume into a claim of its own, of the same size, class and mode, with a pod that mounts a file system', () => {
    const plan = planSnapshot(input({ snapshot: snapshot(cutStatus()) }));
    const claims = plan.copies!.imports.createClaims.map((claim) => claim.desired);
    expect(
      claims.map((claim) => [claim.metadata!.name, claim.spec!.volumeMode, claim.spec!.resources!.requests]),
    ).toEqual([
      ['snap-runner-data', 'Filesystem', { storage: '1Mi' }],
      ['snap-system-disk', 'Block', { storage: '1Gi' }],
    ]);
    expect(claims[0]!.metadata!.ownerReferences).toEqual([
      expect.objectContaining({ name: 'snap', uid: 'snap-uid' }),
    ]);
    expect(claims[0]!.metadata!.labels).toMatchObject({ [LABEL_SNAPSHOT]: 'snap' });
    expect(claims[0]!.metadata!.labels).not.toHaveProperty('app.kubernetes.io/instance'); // not the VM's

    const started = planSnapshot(input({ snapshot: snapshot(cutStatus()), copyClaims: copyClaims(false) }));
    expect(
      started.copies!.imports.startImports.map((disk) => [disk.volume, disk.source, disk.filesystem]),
    ).toEqual([
      ['runner-data', { pvc: { name: 'vm-runner-data' } }, true],
      ['system-disk', { pvc: { name: 'vm-system-disk' } }, false],
    ]);
    const files = copyPod('runner-data', 'Running').spec!.containers[0]!;
    expect(files.volumeMounts).toEqual(
      expect.arrayContaining([
        { name: 'source', mountPath: '/vmop-source', readOnly: true },
        { name: 'disk', mountPath: '/vmop-target', readOnly: false },
      ]),
    );
    expect(files.volumeDevices).toBeUndefined();
    expect(files.env).toEqual([]); // no progress key: nothing for Redis
    expect(started.status.phase).toBe('InProgress');
  });

  it('is Ready once every copy succeeded, and Failed when one failed, with its reason', () => {
    const succeeded = {
      result: 'Succeeded',
      reason: 'Imported',
      message: 'imported raw image (a copy of claim vm-system-disk)',
    };
    const copied = planSnapshot(
      input({
        snapshot: snapshot(cutStatus()),
        copyClaims: copyClaims(false),
        copyPods: [
          copyPod('runner-data', 'Succeeded', succeeded),
          copyPod('system-disk', 'Succeeded', succeeded),
        ],
      }),
    );
    expect(copied.copies!.imports.markImported.map((mark) => mark.claim)).toEqual([
      'snap-runner-data',
      'snap-system-disk',
    ]);
    expect(copied.status).toMatchObject({
      phase: 'Ready',
      readyAt: NOW.toISOString(),
      message: '2 volumes copied',
    });
    expect(copied.status.volumes!.map((volume) => volume.phase)).toEqual(['Ready', 'Ready']);

    const failed = planSnapshot(
      input({
        snapshot: snapshot(cutStatus()),
        copyClaims: copyClaims(false),
        copyPods: [
          copyPod('runner-data', 'Succeeded', succeeded),
          copyPod('system-disk', 'Failed', { result: 'Failed', reason: 'TooLarge', message: 'no room' }),
        ],
      }),
    );
    expect(failed.status).toMatchObject({
      phase: 'Failed',
      message: 'copying failed: system-disk: TooLarge: no room',
    });
  });

  it('fails when the VM was started while its volumes were copied, and leaves nothing running once done', () => {
    const started = planSnapshot(
      input({ snapshot: snapshot(cutStatus()), copyClaims: copyClaims(false), vmPods: [runnerPod] }),
    );
    expect(started.status).toMatchObject({
      phase: 'Failed',
      message: expect.stringContaining('pod vm-abcde took the VM'),
    });
    const leftover = copyPod('system-disk', 'Succeeded');
    const done = planSnapshot(
      input({ snapshot: snapshot({ ...cutStatus(), phase: 'Ready' }), copyPods: [leftover] }),
    );
    expect(done.deletePods).toEqual([leftover]);
    expect(done.copies).toBeUndefined();
  });
});

describe("a running VM's snapshot, copied by the VM's QEMU", () => {
  const running = VirtualMachine.parse({
    ...vm,
    spec: { ...vm.spec, vm: { ...vm.spec.vm, state: 'Running' } },
    status: {
      phase: 'Running',
      runnerPod: { name: 'vm-abcde' },
      runner: { runId: 'run-1', seq: 3 },
      ipAddress: '10.66.10.7',
    },
  });
  const pod = {
    metadata: {
      name: 'vm-abcde',
      namespace: 'ns',
      uid: 'pod-uid',
      labels: { ...vmLabels('vm'), 'app.kubernetes.io/component': 'vm-runner' },
    },
  } as V1Pod;
  const reported = (snapshotCopy: object) =>
    VirtualMachine.parse({ ...running, status: { ...running.status, snapshotCopy } });
  const runningInput = (overrides: Partial<SnapshotInput> = {}) =>
    input({ vm: running, vmPods: [pod], ...overrides });
  const cut = () => planSnapshot(runningInput()).status;
  const exportPod = (phase: string, podIP?: string): V1Pod => ({
    metadata: {
      name: 'snap-export-system-disk',
      uid: 'export-uid',
      labels: {
        [LABEL_SNAPSHOT]: 'snap',
        'app.kubernetes.io/component': 'snapshot-export',
        'vmoperator.jdrupes.org/volume': 'system-disk',
      },
    },
    status: { phase, ...(podIP && { podIP }) },
  });
  /** The status once the export pod serves: the runner is asked for the copy. */
  const serving = () =>
    planSnapshot(runningInput({ snapshot: snapshot(cut()), copyPods: [exportPod('Running', '10.1.1.5')] }))
      .status;

  it('is cut on the pod the VM runs in; its consistency and instant are for the runner to say', () => {
    const status = cut();
    expect(status).toMatchObject({
      phase: 'InProgress',
      runner: { pod: 'vm-abcde', podUid: 'pod-uid', runId: 'run-1' },
      message: 'the VM runs: its QEMU copies runner-data, system-disk at one instant',
      virtualMachine: { uid: 'vm-uid', ipAddress: '10.66.10.7' },
    });
    expect(status).not.toHaveProperty('consistency');
    expect(status).not.toHaveProperty('cutAt');
  });

  it('waits while the VM moves live', () => {
    const target = { metadata: { ...pod.metadata, name: 'vm-fghij', uid: 'target-uid' } } as V1Pod;
    expect(planSnapshot(runningInput({ vmPods: [pod, target] })).status).toMatchObject({
      phase: 'Pending',
      message: 'the VM moves live: the snapshot is taken once it has moved',
    });
  });

  it("makes each disk's copy claim and export pod, and names their addresses once all serve", () => {
    const starting = planSnapshot(runningInput({ snapshot: snapshot(cut()) }));
    expect(starting.createExports!.map((volume) => volume.name)).toEqual(['system-disk']);
    expect(starting.copies!.imports.createClaims.map((claim) => claim.claimName)).toEqual([
      'snap-system-disk',
    ]);
    expect(starting.copies!.imports.startImports).toEqual([]); // the runner data waits for the cut
    expect(starting.status.runner).not.toHaveProperty('targets');

    const pending = planSnapshot(
      runningInput({ snapshot: snapshot(cut()), copyPods: [exportPod('Pending')] }),
    );
    expect(pending.createExports).toEqual([]);
    expect(pending.status.runner).not.toHaveProperty('targets');

    expect(serving().runner!.targets).toEqual([
      { volume: 'system-disk', host: '10.1.1.5', port: 10809, export: 'disk' },
    ]);
  });

  it("takes the runner's cut: consistency, instant and frozen time; then copies the runner data on the VM's node", () => {
    const copying = planSnapshot(
      runningInput({
        snapshot: snapshot(serving()),
        vm: reported({
          id: 'snap-uid',
          state: 'copying',
          consistency: 'FileSystem',
          cutAt: '2026-11-29T20:00:01.000Z',
          frozenMs: 42,
        }),
        copyPods: [exportPod('Running', '10.1.1.5')],
      }),
    );
    expect(copying.status).toMatchObject({
      phase: 'InProgress',
      consistency: 'FileSystem',
      cutAt: '2026-11-29T20:00:01.000Z',
      runner: { frozenMs: 42 },
    });
    expect(copying.copies!.imports.startImports).toEqual([]); // its claim first
    const claimed = planSnapshot(
      runningInput({
        snapshot: snapshot(copying.status),
        vm: reported({ id: 'snap-uid', state: 'copying', consistency: 'FileSystem', cutAt: 'x' }),
        copyPods: [exportPod('Running', '10.1.1.5')],
        copyClaims: copyClaims(false),
      }),
    );
    expect(claimed.copies!.imports.startImports.map((disk) => disk.volume)).toEqual(['runner-data']);
  });

  it('is Ready once the runner copied the disks and the runner data is copied; the export pods go', () => {
    const succeeded = { result: 'Succeeded', reason: 'Imported', message: 'copied' };
    const done = planSnapshot(
      runningInput({
        snapshot: snapshot(serving()),
        vm: reported({
          id: 'snap-uid',
          state: 'completed',
          consistency: 'Crash',
          reason: 'no guest agent answers',
          cutAt: 'x',
        }),
        copyPods: [exportPod('Running', '10.1.1.5'), copyPod('runner-data', 'Succeeded', succeeded)],
        copyClaims: copyClaims(false),
      }),
    );
    expect(done.status).toMatchObject({ phase: 'Ready', consistency: 'Crash', message: '2 volumes copied' });
    expect(done.copies!.imports.markImported.map((mark) => mark.claim).sort()).toEqual([
      'snap-runner-data',
      'snap-system-disk',
    ]);
    expect(done.copies!.imports.deletePods.map((p) => p.metadata!.name)).toContain('snap-export-system-disk');
  });

  it('fails, saying why, when the runner could not copy, or its pod or run went during the copy', () => {
    const asked = snapshot(serving());
    const refused = planSnapshot(
      runningInput({
        snapshot: asked,
        vm: reported({
          id: 'snap-uid',
          state: 'failed',
          message:
            'no guest agent answers: a copy that is only crash-consistent was refused (requiredConsistency)',
        }),
      }),
    );
    expect(refused.status).toMatchObject({
      phase: 'Failed',
      message:
        "the VM's QEMU did not copy its disks: no guest agent answers: a copy that is only crash-consistent was refused (requiredConsistency)",
    });
    // Another snapshot's report says nothing of this one.
    expect(
      planSnapshot(runningInput({ snapshot: asked, vm: reported({ id: 'other', state: 'failed' }) })).status
        .phase,
    ).toBe('InProgress');
    expect(planSnapshot(runningInput({ snapshot: asked, vmPods: [] })).status).toMatchObject({
      phase: 'Failed',
      message: "the VM's runner pod vm-abcde went during the copy",
    });
    const restarted = VirtualMachine.parse({
      ...running,
      status: { ...running.status, runner: { runId: 'run-2', seq: 1 } },
    });
    expect(planSnapshot(runningInput({ snapshot: asked, vm: restarted })).status).toMatchObject({
      phase: 'Failed',
      message: "the VM's runner (pod vm-abcde) restarted during the copy",
    });
  });
});
