// What a VirtualMachineSnapshot needs next (pure). Pending until its VM is stopped; then the cut:
// InProgress, with the VM's volumes, spec and address recorded, which holds the VM's start
// (virtual-machine/plan.ts) while each volume is copied into a claim of the snapshot's own by the
// same importer pods an image's claim is filled by; Ready once all copies are, Failed when one fails
// or the VM was started after all.
import type { V1PersistentVolumeClaim, V1Pod } from '@kubernetes/client-node';
import { formatBytes, parseMemorySize } from '../../api/runner-config.js';
import type { VirtualMachine } from '../../api/virtual-machine.js';
import {
  isSnapshotDone,
  provisioningSecretName,
  provisioningSecrets,
  snapshotClaimName,
  type SnapshotStatus,
  type SnapshotVolume,
  type VirtualMachineSnapshot,
} from '../../api/virtual-machine-snapshot.js';
import { runnerClaims, type RunnerClaim } from '../virtual-machine/disks/claims.js';
import type { ClaimWait } from '../virtual-machine/disks/claim-binding.js';
import { planImports, type DiskImports, type ImportDisk } from '../virtual-machine/disks/imports.js';
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
function cut(input: SnapshotInput, vm: VirtualMachine): SnapshotStatus {
  const volumes = volumesToCopy(vm, input.vmClaims, input.snapshot.metadata.name);
  const { [LAST_APPLIED]: _lastApplied, ...annotations } = vm.metadata.annotations ?? {};
  // Copied by the reconcile in the same look as the cut (the Secrets may change once the VM may run).
  const secrets = provisioningSecrets(vm.spec).map((secret) => ({
    ...secret,
    copyName: provisioningSecretName(input.snapshot.metadata.name, secret.field),
  }));
  return {
    phase: 'InProgress',
    consistency: 'Stopped',
    cutAt: input.now.toISOString(),
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
    message: `the VM is stopped: copying ${volumes.map((volume) => volume.name).join(', ') || 'nothing'}`,
  };
}

function planCopies(input: SnapshotInput, status: SnapshotStatus): SnapshotPlan {
  const { snapshot } = input;
  const volumes = status.volumes ?? [];
  const user = input.vmPods[0]; // a pod that is going may still write
  if (user)
    return {
      status: {
        ...status,
        phase: 'Failed',
        message: takenIntoUse(user),
      },
      deletePods: live(input.copyPods),
    };
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
    importerPods: input.copyPods,
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
  const withPhases = volumes.map((volume): SnapshotVolume => {
    if (copied(volume)) return { ...volume, phase: 'Ready', message: `copied into ${volume.copyClaimName}` };
    const copying = imports.statuses.get(volume.name);
    return {
      ...volume,
      phase: copying?.phase === 'Failed' ? 'Failed' : 'Copying',
      ...(copying?.message && { message: copying.message }),
    };
  });
  const failed = withPhases.filter((volume) => volume.phase === 'Failed');
  const ready = withPhases.every((volume) => volume.phase === 'Ready');
  return {
    status: {
      ...status,
      volumes: withPhases,
      ...(failed.length > 0
        ? {
            phase: 'Failed',
            message: `copying failed: ${failed.map((volume) => `${volume.name}: ${volume.message}`).join('; ')}`,
          }
        : ready
          ? {
              phase: 'Ready',
              readyAt: input.now.toISOString(),
              message: `${volumes.length} volumes copied`,
            }
          : {
              message: `copying ${withPhases
                .filter((volume) => volume.phase === 'Copying')
                .map((volume) => volume.name)
                .join(', ')}`,
            }),
    },
    copies: { imports, disks },
    deletePods: [],
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
  if (status.phase === 'InProgress') return planCopies(input, status);
  if (!vm) return pending(`VirtualMachine ${snapshot.spec.virtualMachineName} does not exist`);
  const user = input.vmPods[0]; // a pod that is going may still write
  if (user)
    return pending(
      isImporterPod(user)
        ? `a disk of the VM is being imported (pod ${user.metadata?.name}): the snapshot is taken once it is`
        : 'the VM runs: vmop takes snapshots of stopped VMs; this one is taken once the VM has stopped',
    );
  return { status: cut(input, vm), deletePods: [] };
}
