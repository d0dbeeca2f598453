// What a VirtualMachineSnapshot needs next (pure). The cut records the VM's volumes, spec and
// address. A stopped VM's cut holds its start (virtual-machine/plan.ts) while each volume is copied
// into a claim of the snapshot's own by the same importer pods an image's claim is filled by; a
// running VM's disks are copied by its own QEMU at one instant (running.ts). Ready once all copies
// are, Failed when one fails, or a stopped VM was started after all.
import type { V1PersistentVolumeClaim, V1Pod } from '@kubernetes/client-node';
import { formatBytes, parseMemorySize } from '../../api/runner-config.js';
import type { VirtualMachine } from '../../api/virtual-machine.js';
import {
  isSnapshotDone,
  provisioningSecretName,
  provisioningSecrets,
  snapshotClaimName,
  type SnapshotRunnerCopy,
  type SnapshotStatus,
  type SnapshotVolume,
  type VirtualMachineSnapshot,
} from '../../api/virtual-machine-snapshot.js';
import { runnerClaims, type RunnerClaim } from '../virtual-machine/disks/claims.js';
import type { ClaimWait } from '../virtual-machine/disks/claim-binding.js';
import { planImports, type DiskImports, type ImportDisk } from '../virtual-machine/disks/imports.js';
import {
  exportPodName,
  isExportPod,
  planRunningDisks,
  runnerAtCut,
  runnerCopyDigest,
  runningPod,
} from './running.js';
import { isImporterPod } from '../virtual-machine/disks/importer-pod.js';
import {
  IMPORTED_ANNOTATION,
  IMPORT_SOURCE_ANNOTATION,
  ownerReference,
  snapshotLabels,
  sourceDigest,
} from '../virtual-machine/naming.js';

export interface SnapshotInput {
  snapshot: VirtualMachineSnapshot;
  /** The VM the snapshot names, if it exists. */
  vm?: VirtualMachine;
  /** The VM's claims and pods (by its labels): runner pods, importer and attach pods. */
  vmClaims: V1PersistentVolumeClaim[];
  vmPods: V1Pod[];
  /** The snapshot's own claims and copying pods (by its labels). */
  copyClaims: V1PersistentVolumeClaim[];
  copyPods: V1Pod[];
  claimWait?: (claim: V1PersistentVolumeClaim) => ClaimWait | undefined;
  now: Date;
}

export interface SnapshotPlan {
  status: SnapshotStatus;
  /** The copies to carry out (claims, pods, claims marked copied, pods that go). */
  copies?: { imports: DiskImports; disks: ImportDisk[] };
  /** Copying pods left once the snapshot is done. */
  deletePods: V1Pod[];
  /** A running VM's disk volumes whose export pod is to be made (running.ts). */
  createExports?: SnapshotVolume[];
}

/** A kubectl annotation that holds the whole object again: not worth keeping twice. */
const LAST_APPLIED = 'kubectl.kubernetes.io/last-applied-configuration';

/** Why a snapshot fails when a pod of its VM appeared during the copy. */
export const takenIntoUse = (pod: V1Pod) =>
  `pod ${pod.metadata?.name} took the VM's volumes into use while they were copied: the copies would not be of one instant; take another snapshot`;

const live = (pods: V1Pod[]) => pods.filter((pod) => !pod.metadata?.deletionTimestamp);

/** The VM's volumes that exist, each with the claim its copy goes to. */
export function volumesToCopy(
  vm: VirtualMachine,
  vmClaims: V1PersistentVolumeClaim[],
  snapshotName: string,
): SnapshotVolume[] {
  return runnerClaims(vm, vmClaims).flatMap((claim): SnapshotVolume[] => {
    const made = vmClaims.find((c) => c.metadata?.name === claim.claimName);
    if (!made) return []; // never made: the VM never ran with it
    const size = made.status?.capacity?.storage ?? made.spec?.resources?.requests?.storage;
    const storageClassName = made.spec?.storageClassName;
    return [
      {
        name: claim.volume,
        claimName: claim.claimName,
        copyClaimName: snapshotClaimName(snapshotName, claim.volume),
        ...(size !== undefined && { size: String(size) }),
        volumeMode: made.spec?.volumeMode === 'Block' ? 'Block' : 'Filesystem',
        ...(storageClassName && { storageClassName }),
        phase: 'Copying',
      },
    ];
  });
}

/** The claim a volume is copied into: as large as the original, of its class and mode. */
function copyClaim(snapshot: VirtualMachineSnapshot, volume: SnapshotVolume): RunnerClaim {
  const source = { pvc: { name: volume.claimName } };
  return {
    volume: volume.name,
    claimName: volume.copyClaimName,
    exists: false,
    block: volume.volumeMode === 'Block',
    desired: {
      apiVersion: 'v1',
      kind: 'PersistentVolumeClaim',
      metadata: {
        name: volume.copyClaimName,
        namespace: snapshot.metadata.namespace,
        labels: snapshotLabels(snapshot.metadata.name),
        annotations: { [IMPORT_SOURCE_ANNOTATION]: sourceDigest(source) },
        ownerReferences: [ownerReference(snapshot)],
      },
      spec: {
        accessModes: ['ReadWriteOnce'],
        volumeMode: volume.volumeMode,
        resources: { requests: { storage: volume.size ?? '1Mi' } },
        ...(volume.storageClassName && { storageClassName: volume.storageClassName }),
      },
    },
  };
}

/** The volumes' sizes added up, as a quantity. */
function totalSize(volumes: SnapshotVolume[]): string | undefined {
  const sizes = volumes.map((volume) => parseMemorySize(volume.size ?? ''));
  if (sizes.some((size) => size === undefined)) return undefined;
  return formatBytes(sizes.reduce<number>((sum, size) => sum + size!, 0));
}

/** The cut: what the VM was, the volumes to copy. Copying starts at the next look (the VM is held first). */
function cut(input: SnapshotInput, vm: VirtualMachine, runner?: SnapshotRunnerCopy): SnapshotStatus {
  const volumes = volumesToCopy(vm, input.vmClaims, input.snapshot.metadata.name);
  const { [LAST_APPLIED]: _lastApplied, ...annotations } = vm.metadata.annotations ?? {};
  // Copied by the reconcile in the same look as the cut (the Secrets may change once the VM may run).
  const secrets = provisioningSecrets(vm.spec).map((secret) => ({
    ...secret,
    copyName: provisioningSecretName(input.snapshot.metadata.name, secret.field),
  }));
  const names = volumes.map((volume) => volume.name).join(', ') || 'nothing';
  return {
    phase: 'InProgress',
    // A running VM's consistency and cut are its runner's to say (running.ts).
    ...(runner ? { runner } : { consistency: 'Stopped', cutAt: input.now.toISOString() }),
    volumes,
    ...(totalSize(volumes) && { size: totalSize(volumes) }),
    virtualMachine: {
      ...(vm.metadata.uid && { uid: vm.metadata.uid }),
      ...(vm.metadata.labels && { labels: vm.metadata.labels }),
      ...(Object.keys(annotations).length > 0 && { annotations }),
      spec: vm.spec as Record<string, unknown>,
      ...(vm.status?.ipAddress && { ipAddress: vm.status.ipAddress }),
      ...(secrets.length > 0 && { secrets }),
    },
    message: runner
      ? `the VM runs: its QEMU copies ${names} at one instant`
      : `the VM is stopped: copying ${names}`,
  };
}

/** The copies of `volumes` by importer pods (the VM's claims read as they are), with their phases. */
function importCopies(input: SnapshotInput, volumes: SnapshotVolume[]) {
  const { snapshot } = input;
  const disks: ImportDisk[] = volumes.map((volume) => ({
    volume: volume.name,
    claimName: volume.copyClaimName,
    source: { pvc: { name: volume.claimName } },
    filesystem: volume.volumeMode === 'Filesystem',
  }));
  const claims = volumes.map((volume) => copyClaim(snapshot, volume));
  const imports = planImports({
    disks,
    claims: claims.map((claim) => ({
      ...claim,
      exists: input.copyClaims.some((c) => c.metadata?.name === claim.claimName),
    })),
    existing: input.copyClaims,
    importerPods: input.copyPods.filter((pod) => !isExportPod(pod)),
    progress: new Map(),
    failedBefore: (name) => volumes.find((volume) => volume.name === name)?.phase === 'Failed',
    ...(input.claimWait && { claimWait: input.claimWait }),
  });
  const copied = (volume: SnapshotVolume) =>
    imports.markImported.some((marked) => marked.claim === volume.copyClaimName) ||
    input.copyClaims.some(
      (c) =>
        c.metadata?.name === volume.copyClaimName &&
        c.metadata.annotations?.[IMPORTED_ANNOTATION] !== undefined,
    );
  const phases = volumes.map((volume): SnapshotVolume => {
    if (copied(volume)) return { ...volume, phase: 'Ready', message: `copied into ${volume.copyClaimName}` };
    const copying = imports.statuses.get(volume.name);
    return {
      ...volume,
      phase: copying?.phase === 'Failed' ? 'Failed' : 'Copying',
      ...(copying?.message && { message: copying.message }),
    };
  });
  return { imports, disks, phases };
}

/** The status once the volumes are as `phases` say: Failed when one failed, Ready when all are. */
function withVolumePhases(status: SnapshotStatus, phases: SnapshotVolume[], now: Date): SnapshotStatus {
  const failed = phases.filter((volume) => volume.phase === 'Failed');
  const ready = phases.every((volume) => volume.phase === 'Ready');
  return {
    ...status,
    volumes: phases,
    ...(failed.length > 0
      ? {
          phase: 'Failed',
          message: `copying failed: ${failed.map((volume) => `${volume.name}: ${volume.message}`).join('; ')}`,
        }
      : ready
        ? { phase: 'Ready', readyAt: now.toISOString(), message: `${phases.length} volumes copied` }
        : {
            message: `copying ${phases
              .filter((volume) => volume.phase === 'Copying')
              .map((volume) => volume.name)
              .join(', ')}`,
          }),
  };
}

function planCopies(input: SnapshotInput, status: SnapshotStatus): SnapshotPlan {
  const user = input.vmPods[0]; // a pod that is going may still write
  if (user)
    return {
      status: { ...status, phase: 'Failed', message: takenIntoUse(user) },
      deletePods: live(input.copyPods),
    };
  const { imports, disks, phases } = importCopies(input, status.volumes ?? []);
  return {
    status: withVolumePhases(status, phases, input.now),
    copies: { imports, disks },
    deletePods: [],
  };
}

/**
 * A running VM's copy (running.ts): the disks by its QEMU into export pods' claims, the runner
 * data by an importer pod on the VM's node once the disks are cut.
 */
function planRunningCopies(input: SnapshotInput, status: SnapshotStatus): SnapshotPlan {
  const { snapshot } = input;
  const disks = planRunningDisks({
    snapshotUid: snapshot.metadata.uid ?? '',
    status,
    ...(input.vm && { vm: input.vm }),
    vmPods: input.vmPods,
    copyPods: input.copyPods,
  });
  if (disks.failure)
    return {
      status: { ...status, phase: 'Failed', message: disks.failure },
      deletePods: live(input.copyPods),
    };
  const { report } = disks;
  let next = disks.status;
  if (report?.cutAt)
    next = {
      ...next,
      ...(report.consistency && { consistency: report.consistency }),
      cutAt: report.cutAt,
      runner: { ...next.runner!, ...(report.frozenMs !== undefined && { frozenMs: report.frozenMs }) },
    };
  const volumes = next.volumes ?? [];
  const blocks = volumes.filter((volume) => volume.volumeMode === 'Block');
  const files = volumes.filter((volume) => volume.volumeMode === 'Filesystem');
  // The runner data as it is right after the cut (its TPM state and UEFI variables then).
  const fileCopies = report?.cutAt ? importCopies(input, files) : undefined;
  const made = (volume: SnapshotVolume) =>
    input.copyClaims.find((claim) => claim.metadata?.name === volume.copyClaimName);
  const blockClaims = blocks.filter((volume) => !made(volume)).map((volume) => copyClaim(snapshot, volume));
  const phases = volumes.map((volume): SnapshotVolume => {
    if (volume.volumeMode === 'Block')
      return disks.disksCopied
        ? { ...volume, phase: 'Ready', message: `copied into ${volume.copyClaimName} by the VM's QEMU` }
        : {
            ...volume,
            phase: 'Copying',
            message: next.runner?.targets
              ? "the VM's QEMU copies it"
              : `waiting for export pod ${exportPodName(snapshot.metadata.name, volume.name)}`,
          };
    return fileCopies?.phases.find((copy) => copy.name === volume.name) ?? volume;
  });
  const imports: DiskImports = {
    createClaims: [...blockClaims, ...(fileCopies?.imports.createClaims ?? [])],
    startImports: fileCopies?.imports.startImports ?? [],
    markImported: [
      ...(disks.disksCopied
        ? blocks
            .filter((volume) => made(volume)?.metadata?.annotations?.[IMPORTED_ANNOTATION] === undefined)
            .map((volume) => ({ claim: volume.copyClaimName, digest: runnerCopyDigest(volume) }))
        : []),
      ...(fileCopies?.imports.markImported ?? []),
    ],
    deletePods: [
      ...(disks.disksCopied ? live(input.copyPods).filter(isExportPod) : []),
      ...(fileCopies?.imports.deletePods ?? []),
    ],
    statuses: fileCopies?.imports.statuses ?? new Map(),
    ended: fileCopies?.imports.ended ?? [],
  };
  return {
    status: withVolumePhases(next, phases, input.now),
    copies: { imports, disks: fileCopies?.disks ?? [] },
    deletePods: [],
    createExports: disks.createExports,
  };
}

export function planSnapshot(input: SnapshotInput): SnapshotPlan {
  const { snapshot, vm } = input;
  const status = snapshot.status ?? {};
  const pending = (message: string): SnapshotPlan => ({
    status: { ...status, phase: 'Pending', message },
    deletePods: [],
  });
  if (isSnapshotDone(snapshot)) return { status, deletePods: live(input.copyPods) };
  if (status.phase === 'InProgress')
    return status.runner ? planRunningCopies(input, status) : planCopies(input, status);
  if (!vm) return pending(`VirtualMachine ${snapshot.spec.virtualMachineName} does not exist`);
  if (input.vmPods.length === 0) return { status: cut(input, vm), deletePods: [] };
  const importer = input.vmPods.find(isImporterPod);
  if (importer)
    return pending(
      `a disk of the VM is being imported (pod ${importer.metadata?.name}): the snapshot is taken once it is`,
    );
  const running = runningPod(vm, input.vmPods);
  if ('waitFor' in running) return pending(running.waitFor);
  return { status: cut(input, vm, runnerAtCut(vm, running.pod)), deletePods: [] };
}
