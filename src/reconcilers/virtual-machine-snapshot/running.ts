// The snapshot of a running VM (pure). Its disks are copied by the VM's own QEMU as they were at
// one instant (frozen through the guest agent when one answers): each disk's copy claim is served
// by an export pod (qemu-nbd, TLS with the VM's key), and once all serve, the VM's runner is asked
// for the copy (its config's vm.snapshotCopy, see the VM's observe.ts) and reports it in the VM's
// status.snapshotCopy. The runner data (TPM state, UEFI variables) is copied file by file by an
// importer pod right after the cut, as a stopped VM's is.
import type { V1Pod } from '@kubernetes/client-node';
import type { VirtualMachine } from '../../api/virtual-machine.js';
import type { SnapshotCopyState, SnapshotCopyTarget } from '../../api/snapshot-copy.js';
import type { SnapshotStatus, SnapshotVolume } from '../../api/virtual-machine-snapshot.js';
import { NBD_EXPORT, NBD_PORT } from '../virtual-machine/disks/attach-pod.js';
import { LABEL_COMPONENT, LABEL_VOLUME, sourceDigest } from '../virtual-machine/naming.js';
import { RUNNER_COMPONENT } from '../virtual-machine/runner-pod/pod.js';

export const EXPORT_COMPONENT = 'snapshot-export';
export const exportPodName = (snapshot: string, volume: string) => `${snapshot}-export-${volume}`;
export const isExportPod = (pod: V1Pod) => pod.metadata?.labels?.[LABEL_COMPONENT] === EXPORT_COMPONENT;

const isRunnerPod = (pod: V1Pod) => pod.metadata?.labels?.[LABEL_COMPONENT] === RUNNER_COMPONENT;
const live = (pods: V1Pod[]) => pods.filter((pod) => !pod.metadata?.deletionTimestamp);

/**
 * The runner pod a running VM's snapshot is cut on, or why the snapshot waits: the VM's guest
 * runs in exactly one pod, which its status names.
 */
export function runningPod(vm: VirtualMachine, vmPods: V1Pod[]): { pod: V1Pod } | { waitFor: string } {
  const runners = live(vmPods).filter(isRunnerPod);
  if (runners.length > 1 || vm.status?.phase === 'Migrating')
    return { waitFor: 'the VM moves live: the snapshot is taken once it has moved' };
  const pod = runners[0];
  if (!pod || vm.status?.phase !== 'Running' || vm.status.runnerPod?.name !== pod.metadata?.name)
    return {
      waitFor: `the VM is ${vm.status?.phase ?? 'starting'}: the snapshot is taken once it runs or has stopped`,
    };
  return { pod };
}

/** The cut's record of who copies: the pod and the runner's run. */
export function runnerAtCut(vm: VirtualMachine, pod: V1Pod): NonNullable<SnapshotStatus['runner']> {
  return {
    pod: pod.metadata!.name!,
    podUid: pod.metadata!.uid!,
    ...(vm.status?.runner?.runId && { runId: vm.status.runner.runId }),
  };
}

export interface RunningCopyInput {
  snapshotUid: string;
  status: SnapshotStatus;
  vm?: VirtualMachine;
  vmPods: V1Pod[];
  /** The snapshot's pods: export pods and the runner data's importer pod. */
  copyPods: V1Pod[];
}

export interface RunningCopyPlan {
  status: SnapshotStatus;
  /** Disk volumes whose export pod is to be made. */
  createExports: SnapshotVolume[];
  /** The runner reported its copy complete: disk copies to mark as filled. */
  disksCopied: boolean;
  /** Why the snapshot fails, when it does. */
  failure?: string;
  /** The runner's report of this snapshot's copy, if it made one. */
  report?: SnapshotCopyState;
}

/** Where the disk copies stand: export pods, the runner's report, the targets once all serve. */
export function planRunningDisks(input: RunningCopyInput): RunningCopyPlan {
  const { status, vm } = input;
  const runner = status.runner!;
  const disks = (status.volumes ?? []).filter((volume) => volume.volumeMode === 'Block');
  const reported = vm?.status?.snapshotCopy;
  const report = reported?.id === input.snapshotUid ? reported : undefined;
  const copied = report?.state === 'completed';
  const plan = (failure?: string): RunningCopyPlan => ({
    status,
    createExports: [],
    disksCopied: copied,
    ...(failure && { failure }),
    ...(report && { report }),
  });
  if (report?.state === 'failed') return plan(`the VM's QEMU did not copy its disks: ${report.message}`);
  if (!copied) {
    const runnerPods = live(input.vmPods).filter(isRunnerPod);
    if (!vm) return plan('the VM was deleted during the copy');
    if (!runnerPods.some((pod) => pod.metadata?.uid === runner.podUid))
      return plan(`the VM's runner pod ${runner.pod} went during the copy`);
    if (runnerPods.length > 1) return plan('the VM began to move live during the copy');
    if (runner.runId && vm.status?.runner?.runId && vm.status.runner.runId !== runner.runId)
      return plan(`the VM's runner (pod ${runner.pod}) restarted during the copy`);
  }
  const exports = new Map(
    input.copyPods
      .filter((pod) => isExportPod(pod) && !pod.metadata?.deletionTimestamp)
      .map((pod) => [pod.metadata?.labels?.[LABEL_VOLUME], pod]),
  );
  if (copied) return plan();
  const ended = [...exports.values()].find(
    (pod) => pod.status?.phase === 'Failed' || pod.status?.phase === 'Succeeded',
  );
  if (ended) return plan(`the export pod ${ended.metadata?.name} ended before the copy did`);
  const serving = disks.flatMap((disk): SnapshotCopyTarget[] => {
    const pod = exports.get(disk.name);
    const host = pod?.status?.phase === 'Running' ? pod.status.podIP : undefined;
    return host ? [{ volume: disk.name, host, port: NBD_PORT, export: NBD_EXPORT }] : [];
  });
  const targets = runner.targets ?? (serving.length === disks.length ? serving : undefined);
  return {
    ...plan(),
    status: { ...status, runner: { ...runner, ...(targets && { targets }) } },
    createExports: disks.filter((disk) => !exports.has(disk.name)),
  };
}

/** The digest a disk copy made by the runner is marked imported with (its source: the VM's claim). */
export const runnerCopyDigest = (volume: SnapshotVolume) => sourceDigest({ pvc: { name: volume.claimName } });
