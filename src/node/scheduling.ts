// Which runner pods the agent takes: pure decisions on the pod and the node's labels.
import type { V1Pod } from '@kubernetes/client-node';
import { APP_NAME, LABEL_NAME } from '../reconcilers/virtual-machine/naming.js';

/** The label selector of runner pods. */
export const RUNNER_POD_SELECTOR = `${LABEL_NAME}=${APP_NAME}`;

export type Placement = 'bind' | 'ours' | 'not-ours';

/** A nodeSelector matches when the node has every label it names, with that value. */
export function nodeSelectorMatches(pod: V1Pod, nodeLabels: Record<string, string>): boolean {
  return Object.entries(pod.spec?.nodeSelector ?? {}).every(([key, value]) => nodeLabels[key] === value);
}

const isTerminal = (pod: V1Pod) => pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed';

/**
 * `ours`: bound to this node; `bind`: an unscheduled runner pod this node should take (affinity
 * is not considered); `not-ours`: anything else.
 */
export function placement(pod: V1Pod, nodeName: string, nodeLabels: Record<string, string>): Placement {
  const boundTo = pod.spec?.nodeName;
  if (boundTo) return boundTo === nodeName ? 'ours' : 'not-ours';
  const candidate =
    pod.metadata?.labels?.[LABEL_NAME] === APP_NAME &&
    !pod.metadata.deletionTimestamp &&
    !isTerminal(pod) &&
    nodeSelectorMatches(pod, nodeLabels);
  return candidate ? 'bind' : 'not-ours';
}
