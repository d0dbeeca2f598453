// Whether a VM can move live to another node (pure), and why not: the Migratable condition. Its
// runner pod must have been made by a vmop that can migrate (it reads migration requests), its
// runner data must be shared (both runners use it at once), and nothing it runs with may be
// reachable on its node only. Disks on node-local claims are no obstacle: they are copied.
import type { V1PersistentVolumeClaim, V1Pod } from '@kubernetes/client-node';
import type { VirtualMachine } from '../../../api/virtual-machine.js';
import { IMAGE_REPOSITORY_DIR, RUNNER_DATA_CLAIM, diskVolumeName } from '../naming.js';
import { runnerPodDisks } from '../runner-pod/facts.js';
import { POD_INFO_VOLUME } from '../runner-pod/pod.js';

export interface Migratability {
  migratable: boolean;
  reason: string;
  message: string;
}

/** Whether both nodes can use the claim at once (network storage). */
export const isSharedClaim = (claim: V1PersistentVolumeClaim | undefined) =>
  claim?.spec?.accessModes?.includes('ReadWriteMany') ?? false;

/** The claim each of the pod's volumes names. */
export function podClaims(pod: V1Pod): Map<string, string> {
  return new Map(
    (pod.spec?.volumes ?? []).flatMap((volume) =>
      volume.persistentVolumeClaim ? [[volume.name, volume.persistentVolumeClaim.claimName] as const] : [],
    ),
  );
}

/** A CD medium given as a path outside the image repository: a file of this pod's node. */
const isNodeLocalPath = (image: string) =>
  image.startsWith('/') && !image.startsWith(`${IMAGE_REPOSITORY_DIR}/`);

export function migratability(
  vm: VirtualMachine,
  pod: V1Pod | undefined,
  claims: V1PersistentVolumeClaim[],
): Migratability {
  const no = (reason: string, message: string) => ({ migratable: false, reason, message });
  if (vm.spec.nodeName) return no('PinnedToNode', `spec.nodeName pins the VM to ${vm.spec.nodeName}`);
  const cd = vm.spec.vm.disks.find((disk) => disk.cdrom?.image && isNodeLocalPath(disk.cdrom.image));
  if (cd) return no('NodeLocalMedium', `the CD ${cd.cdrom!.image} is a file of its node only`);
  if (!pod) return { migratable: false, reason: 'NotRunning', message: 'the VM has no runner pod' };
  if (!pod.spec?.volumes?.some((volume) => volume.name === POD_INFO_VOLUME)) {
    return no(
      'RunnerPodTooOld',
      'its runner pod was made by a vmop that could not migrate; the VM can after its next restart',
    );
  }
  // The target pod is made with the spec's disks; the source's attached ones are not in its arguments.
  const podDisks = runnerPodDisks(pod);
  const attached = vm.spec.vm.disks
    .flatMap((disk, index) => (disk.volumeClaimTemplate ? [diskVolumeName(disk, index)] : []))
    .filter((volume) => !podDisks.has(volume));
  if (attached.length > 0) {
    return no(
      'DisksAttachedAtRuntime',
      `disk(s) ${attached.join(', ')} came while the VM runs; it can move after its next restart`,
    );
  }
  const byName = new Map(claims.map((claim) => [claim.metadata?.name, claim]));
  const runnerData = byName.get(podClaims(pod).get(RUNNER_DATA_CLAIM));
  if (runnerData && !isSharedClaim(runnerData)) {
    return no(
      'RunnerDataNotShared',
      `its runner data claim ${runnerData.metadata?.name} is not ReadWriteMany (both nodes use it during a migration)`,
    );
  }
  return { migratable: true, reason: 'Migratable', message: 'the VM can move live to another node' };
}

/** The pod's disks on claims that only one node can use: copied to the target's own claims. */
export function volumesToCopy(pod: V1Pod, claims: V1PersistentVolumeClaim[]): string[] {
  const byName = new Map(claims.map((claim) => [claim.metadata?.name, claim]));
  return [...podClaims(pod)]
    .filter(([volume, claimName]) => volume !== RUNNER_DATA_CLAIM && !isSharedClaim(byName.get(claimName)))
    .filter(([volume]) => pod.spec?.containers?.[0]?.volumeDevices?.some((device) => device.name === volume))
    .map(([volume]) => volume);
}
