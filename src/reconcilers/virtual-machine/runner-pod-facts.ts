// What a VM's runner pod tells about its runner (pure reads of the pod; a leaf that status,
// run policy and restart-awaiting changes share).
import type { V1ContainerStatus, V1Pod } from '@kubernetes/client-node';
import { RUNNER_CONTAINER } from './naming.js';

export function runnerContainer(pod: V1Pod | undefined): V1ContainerStatus | undefined {
  return pod?.status?.containerStatuses?.find((c) => c.name === RUNNER_CONTAINER);
}
