// What a VirtualMachineRestore needs next (pure). Pending until its snapshot is Ready and its VM is
// stopped (stopped by the restore when it may); then InProgress, which holds the VM's start
// (virtual-machine/plan.ts) while a pod per volume writes the snapshot's copy back onto the VM's
// claim; Completed once all are (the VM started again if the restore stopped it), Failed when one
// failed or the VM's volumes were taken into use meanwhile.
import type { V1PersistentVolumeClaim, V1Pod } from '@kubernetes/client-node';
import type { VirtualMachine } from '../../api/virtual-machine.js';
import {
  isRestoreDone,
  type RestoreStatus,
  type RestoreVolume,
  type VirtualMachineRestore,
} from '../../api/virtual-machine-restore.js';
import type { VirtualMachineSnapshot } from '../../api/virtual-machine-snapshot.js';
import { runnerClaims } from '../virtual-machine/disks/claims.js';
import type { ImportDisk } from '../virtual-machine/disks/imports.js';
import { importOutcome } from '../virtual-machine/disks/imports.js';
import { LABEL_VOLUME } from '../virtual-machine/naming.js';

export interface RestoreInput {
  restore: VirtualMachineRestore;
  vm?: VirtualMachine;
  snapshot?: VirtualMachineSnapshot;
  /** The VM's claims and pods (by its labels). */
  vmClaims: V1PersistentVolumeClaim[];
  vmPods: V1Pod[];
  /** The restore's own copying pods (by its labels). */
  copyPods: V1Pod[];
  now: Date;
}

export interface RestorePlan {
  status: RestoreStatus;
  /** Volumes whose copying pod is to be made. */
  startCopies: ImportDisk[];
  deletePods: V1Pod[];
  /** The VM's spec.vm.state to set: stopped for the restore, running again after it. */
  vmState?: 'Stopped' | 'Running';
}

const live = (pods: V1Pod[]) => pods.filter((pod) => !pod.metadata?.deletionTimestamp);

/** The snapshot's volumes the VM still has, each onto the claim that backs it now. */
function volumesToRestore(
  snapshot: VirtualMachineSnapshot,
  vm: VirtualMachine,
  vmClaims: V1PersistentVolumeClaim[],
) {
  const current = runnerClaims(vm, vmClaims).filter((claim) =>
    vmClaims.some((made) => made.metadata?.name === claim.claimName),
  );
  const volumes: RestoreVolume[] = [];
  const skipped: string[] = [];
  for (const copy of snapshot.status?.volumes ?? []) {
    const target = current.find((claim) => claim.volume === copy.name);
    if (!target) {
      skipped.push(copy.name);
      continue;
    }
    volumes.push({
      name: copy.name,
      claimName: target.claimName,
      copyClaimName: copy.copyClaimName,
      volumeMode: copy.volumeMode,
      phase: 'Copying',
    });
  }
  return { volumes, skipped };
}

function planCopies(input: RestoreInput, status: RestoreStatus): RestorePlan {
  const user = input.vmPods[0]; // a pod that is going may still write
  if (user)
    return {
      status: {
        ...status,
        phase: 'Failed',
        message: `pod ${user.metadata?.name} took the VM's volumes into use while they were restored: they are partly restored; restore again with the VM stopped`,
      },
      startCopies: [],
      deletePods: live(input.copyPods),
    };
  const startCopies: ImportDisk[] = [];
  const deletePods: V1Pod[] = [];
  const volumes = (status.volumes ?? []).map((volume): RestoreVolume => {
    const pod = live(input.copyPods).find((p) => p.metadata?.labels?.[LABEL_VOLUME] === volume.name);
    if (volume.phase === 'Restored' || volume.phase === 'Failed') {
      if (pod) deletePods.push(pod);
      return volume;
    }
    const outcome = pod && importOutcome(pod);
    const podPhase = pod?.status?.phase;
    if (outcome?.result === 'Succeeded' && podPhase === 'Succeeded')
      return { ...volume, phase: 'Restored', message: `written back from ${volume.copyClaimName}` };
    if (outcome?.result === 'Failed' && podPhase === 'Failed')
      return { ...volume, phase: 'Failed', message: `${outcome.reason}: ${outcome.message}` };
    if (pod && (podPhase === 'Succeeded' || podPhase === 'Failed')) {
      deletePods.push(pod); // ended without a result (killed, evicted): a new one starts over
      return { ...volume, message: `pod ${pod.metadata?.name} ended without a result; starting over` };
    }
    if (!pod)
      startCopies.push({
        volume: volume.name,
        claimName: volume.claimName,
        source: { pvc: { name: volume.copyClaimName } },
        filesystem: volume.volumeMode === 'Filesystem',
      });
    return { ...volume, message: `writing back ${volume.copyClaimName} onto ${volume.claimName}` };
  });
  const failed = volumes.filter((volume) => volume.phase === 'Failed');
  const done = volumes.every((volume) => volume.phase === 'Restored');
  const next: RestoreStatus = { ...status, volumes };
  if (failed.length > 0)
    return {
      status: {
        ...next,
        phase: 'Failed',
        message: `restoring failed: ${failed.map((volume) => `${volume.name}: ${volume.message}`).join('; ')}`,
      },
      startCopies: [],
      deletePods: live(input.copyPods),
    };
  if (done)
    return {
      status: {
        ...next,
        phase: 'Completed',
        completedAt: input.now.toISOString(),
        message: `${volumes.length} volumes restored from snapshot ${input.restore.spec.virtualMachineSnapshotName}${
          status.stoppedVirtualMachine ? '; the VM is started again' : ''
        }`,
      },
      startCopies: [],
      deletePods: live(input.copyPods),
      ...(status.stoppedVirtualMachine && { vmState: 'Running' as const }),
    };
  return { status: next, startCopies, deletePods };
}

export function planRestore(input: RestoreInput): RestorePlan {
  const { restore, vm, snapshot } = input;
  const status = restore.status ?? {};
  const nothing = { startCopies: [], deletePods: [] };
  const pending = (message: string, more: Partial<RestorePlan> = {}): RestorePlan => ({
    status: { ...status, phase: 'Pending', message },
    ...nothing,
    ...more,
  });
  const failed = (message: string): RestorePlan => ({
    status: { ...status, phase: 'Failed', message },
    ...nothing,
  });
  if (isRestoreDone(restore)) return { status, startCopies: [], deletePods: live(input.copyPods) };
  if (status.phase === 'InProgress') return planCopies(input, status);
  const { virtualMachineName, virtualMachineSnapshotName } = restore.spec;
  if (!snapshot) return pending(`VirtualMachineSnapshot ${virtualMachineSnapshotName} does not exist`);
  if (snapshot.spec.virtualMachineName !== virtualMachineName)
    return failed(
      `snapshot ${virtualMachineSnapshotName} is of VM ${snapshot.spec.virtualMachineName}, not of ${virtualMachineName}`,
    );
  if (snapshot.status?.phase === 'Failed')
    return failed(`snapshot ${virtualMachineSnapshotName} failed: it has nothing to restore`);
  if (snapshot.status?.phase !== 'Ready')
    return pending(
      `snapshot ${virtualMachineSnapshotName} is not Ready yet (${snapshot.status?.phase ?? 'Pending'})`,
    );
  if (!vm) return pending(`VirtualMachine ${virtualMachineName} does not exist`);
  if (input.vmPods.length > 0) {
    if (!restore.spec.stopVirtualMachine)
      return pending(
        'the VM runs: a restore overwrites its disks, so it waits until the VM is stopped (or set stopVirtualMachine)',
      );
    const stopping = vm.spec.vm.state !== 'Stopped';
    return {
      ...pending('stopping the VM to restore it; it is started again once restored', {
        ...(stopping && { vmState: 'Stopped' as const }),
      }),
      status: {
        ...status,
        phase: 'Pending',
        message: 'stopping the VM to restore it; it is started again once restored',
        stoppedVirtualMachine: stopping || status.stoppedVirtualMachine === true,
      },
    };
  }
  const { volumes, skipped } = volumesToRestore(snapshot, vm, input.vmClaims);
  return {
    status: {
      ...status,
      phase: 'InProgress',
      startedAt: input.now.toISOString(),
      volumes,
      message: `writing back ${volumes.map((volume) => volume.name).join(', ') || 'nothing'}${
        skipped.length > 0 ? ` (the VM has no ${skipped.join(', ')} any more: left out)` : ''
      }`,
    },
    ...nothing,
  };
}
