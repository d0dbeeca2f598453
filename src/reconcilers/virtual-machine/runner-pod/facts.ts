// What a VM's runner pod tells about its runner (pure reads of the pod; a leaf that status,
// run policy and restart-awaiting changes share).
import type { V1ContainerStatus, V1Pod } from '@kubernetes/client-node';
import { RUNNER_CONTAINER } from '../naming.js';

/** The image the pod's runner container was made with. */
export const runnerImageOf = (pod: V1Pod | undefined): string | undefined =>
  pod?.spec?.containers?.find((container) => container.name === RUNNER_CONTAINER)?.image;

export function runnerContainer(pod: V1Pod | undefined): V1ContainerStatus | undefined {
  return pod?.status?.containerStatuses?.find((c) => c.name === RUNNER_CONTAINER);
}

/** The disks (block volumes) the runner pod was made with, with their claims; none when no pod. */
export function runnerPodDisks(pod: V1Pod | undefined): Map<string, string> {
  const container = pod?.spec?.containers.find((c) => c.name === RUNNER_CONTAINER);
  const devices = new Set((container?.volumeDevices ?? []).map((device) => device.name));
  return new Map(
    (pod?.spec?.volumes ?? []).flatMap((volume) =>
      volume.persistentVolumeClaim && devices.has(volume.name)
        ? [[volume.name, volume.persistentVolumeClaim.claimName] as const]
        : [],
    ),
  );
}
