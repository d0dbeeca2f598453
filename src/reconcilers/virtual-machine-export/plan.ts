// What a VirtualMachineExport needs next (pure). Pending until its source can be read: a snapshot
// once Ready, a VM while it is stopped (a VM that starts takes its disks back: the server goes and
// the export waits again, as KubeVirt's does). Then a token Secret, a server pod and a Service;
// Ready once the pod is. Expired at creation + ttl: pod, Service and token go. Failed when the
// source failed, names no such disk, or the server could not serve.
import type { V1PersistentVolumeClaim, V1Pod } from '@kubernetes/client-node';
import type { VirtualMachine } from '../../api/virtual-machine.js';
import {
  EXPORT_PORT,
  ExportFormat,
  exportDiskPath,
  exportServerHostnames,
  exportServerName,
  exportTokenSecretName,
  ttlMs,
  type ExportDisk,
  type ExportStatus,
  type VirtualMachineExport,
} from '../../api/virtual-machine-export.js';
import type { SnapshotVolume, VirtualMachineSnapshot } from '../../api/virtual-machine-snapshot.js';
import { volumesToCopy } from '../virtual-machine-snapshot/plan.js';
import type { ServedDisk } from './server-pod.js';

export interface ExportInput {
  vmExport: VirtualMachineExport;
  vm?: VirtualMachine;
  snapshot?: VirtualMachineSnapshot;
  /** The VM's claims and pods (by its labels). */
  vmClaims: V1PersistentVolumeClaim[];
  vmPods: V1Pod[];
  /** The export's server pod, when there is one. */
  serverPod?: V1Pod;
  now: Date;
}

export interface ExportPlan {
  status: ExportStatus;
  /** The disks to serve when the server pod is to be made. */
  serve?: ServedDisk[];
  deleteServerPod?: V1Pod;
  /** Expired: the pod and Service go. */
  tearDown?: boolean;
  expiresAt: Date;
}

/** A disk's name in an export: its volumeClaimTemplate's (the volume is `<name>-disk`). */
export const diskNameOf = (volume: string) => volume.replace(/-disk$/, '');

const podReady = (pod: V1Pod) =>
  pod.status?.conditions?.some((condition) => condition.type === 'Ready' && condition.status === 'True');

/** Why a server pod ended: its container's last words (the export-server's log line). */
function ended(pod: V1Pod): string {
  const terminated = pod.status?.containerStatuses?.[0]?.state?.terminated;
  const said = terminated?.message?.trim().split('\n').pop();
  return said || terminated?.reason || pod.status?.reason || 'it ended';
}

/** The source's disks (block volumes), or why they cannot be read now. */
function sourceDisks(
  input: ExportInput,
): { volumes: SnapshotVolume[] } | { pending: string } | { failed: string } {
  const { vmExport, vm, snapshot, vmPods, vmClaims } = input;
  const { virtualMachineName, virtualMachineSnapshotName } = vmExport.spec.source;
  if (virtualMachineSnapshotName) {
    if (!snapshot) return { pending: `snapshot ${virtualMachineSnapshotName} does not exist` };
    const phase = snapshot.status?.phase ?? 'Pending';
    if (phase === 'Failed') return { failed: `snapshot ${virtualMachineSnapshotName} failed` };
    if (phase !== 'Ready') return { pending: `snapshot ${virtualMachineSnapshotName} is ${phase}` };
    return { volumes: snapshot.status?.volumes ?? [] };
  }
  if (!vm) return { pending: `VM ${virtualMachineName} does not exist` };
  // A pod that is terminating still has the disks (a runner powering its guest down writes on).
  const inUse = vmPods.find((pod) => !['Succeeded', 'Failed'].includes(pod.status?.phase ?? ''));
  if (vm.spec.vm.state === 'Running' || inUse)
    return {
      pending: `VM ${virtualMachineName} runs${inUse ? ` (pod ${inUse.metadata?.name})` : ''}: its disks are served while it is stopped; export a snapshot of a running VM`,
    };
  return { volumes: volumesToCopy(vm, vmClaims, '') };
}

export function planExport(input: ExportInput): ExportPlan {
  const { vmExport, serverPod, now } = input;
  const { name, namespace } = vmExport.metadata;
  const created = new Date(vmExport.metadata.creationTimestamp ?? now);
  const expiresAt = new Date(created.getTime() + ttlMs(vmExport.spec.ttl));
  const previous = vmExport.status ?? {};
  const base = { expiresAt: expiresAt.toISOString(), tokenSecretName: exportTokenSecretName(name) };
  const livePod = serverPod && !serverPod.metadata?.deletionTimestamp ? serverPod : undefined;
  const deleteServerPod = livePod;

  if (now >= expiresAt)
    return {
      status: {
        ...previous,
        ...base,
        phase: 'Expired',
        message: `expired at ${base.expiresAt}; its server is gone`,
      },
      tearDown: true,
      expiresAt,
    };
  if (previous.phase === 'Failed')
    return { status: previous, ...(deleteServerPod && { deleteServerPod }), expiresAt };
  const fail = (message: string): ExportPlan => ({
    status: { ...base, phase: 'Failed', message },
    ...(deleteServerPod && { deleteServerPod }),
    expiresAt,
  });

  const source = sourceDisks(input);
  if ('failed' in source) return fail(source.failed);
  if ('pending' in source)
    return {
      status: { ...base, phase: 'Pending', message: source.pending },
      ...(deleteServerPod && { deleteServerPod }),
      expiresAt,
    };
  const blocks = source.volumes.filter((volume) => volume.volumeMode === 'Block');
  const available = blocks.map((volume) => diskNameOf(volume.name));
  const wanted = vmExport.spec.disks ?? available;
  const missing = wanted.filter((disk) => !available.includes(disk));
  if (missing.length > 0)
    return fail(
      `no disk named ${missing.join(', ')}: ${available.length > 0 ? `there are ${available.join(', ')}` : 'there are no disks with claims'}`,
    );
  if (wanted.length === 0) return fail('there are no disks with claims to export');
  const served = blocks.filter((volume) => wanted.includes(diskNameOf(volume.name)));
  const service = `https://${exportServerHostnames(name, namespace!)[0]}:${EXPORT_PORT}`;
  const disks: ExportDisk[] = served.map((volume) => {
    const disk = diskNameOf(volume.name);
    // A snapshot's copy, or the VM's own claim.
    const claimName = input.vmExport.spec.source.virtualMachineSnapshotName
      ? volume.copyClaimName
      : volume.claimName;
    return {
      name: disk,
      claimName,
      ...(volume.size && { size: volume.size }),
      urls: Object.fromEntries(
        ExportFormat.options.map((format) => [format, `${service}${exportDiskPath(disk, format)}`]),
      ) as ExportDisk['urls'],
    };
  });
  const status = { ...base, serviceName: exportServerName(name), disks };
  if (livePod?.status?.phase === 'Failed') return fail(`the export server failed: ${ended(livePod)}`);
  if (!livePod)
    return {
      status: { ...status, phase: 'Pending', message: 'the export server starts' },
      ...(!serverPod && { serve: disks.map(({ name: disk, claimName }) => ({ name: disk, claimName })) }),
      expiresAt,
    };
  if (!podReady(livePod))
    return {
      status: { ...status, phase: 'Pending', message: 'the export server makes the qcow2 images' },
      expiresAt,
    };
  return {
    status: {
      ...status,
      phase: 'Ready',
      message: `${disks.length} disk${disks.length === 1 ? '' : 's'} served until ${base.expiresAt}`,
    },
    expiresAt,
  };
}
