// What the node of a VM's runner pod tells (pure): whether it reports, and whether it is gone for
// sure. A node that stopped reporting may still run the VM (a cut link, a dead kubelet), so its
// pod counts as running until the node is deleted or an admin tainted it out of service
// (Kubernetes' non-graceful node shutdown), as Kubernetes and KubeVirt hold it.
import type { V1Node } from '@kubernetes/client-node';

export const OUT_OF_SERVICE_TAINT = 'node.kubernetes.io/out-of-service';

export interface NodeFacts {
  name: string;
  /** Ready: kubelet reports; NotReady: it does not (or says so); Gone: the Node was deleted. */
  state: 'Ready' | 'NotReady' | 'Gone';
  outOfService: boolean;
  unschedulable: boolean;
  /** Since when the Ready condition has been as it is. */
  since?: string;
}

export function nodeFacts(name: string, node: V1Node | undefined): NodeFacts {
  if (!node) return { name, state: 'Gone', outOfService: false, unschedulable: false };
  const ready = node.status?.conditions?.find((c) => c.type === 'Ready');
  const since = ready?.lastTransitionTime;
  return {
    name,
    state: ready?.status === 'True' ? 'Ready' : 'NotReady',
    outOfService: node.spec?.taints?.some((taint) => taint.key === OUT_OF_SERVICE_TAINT) ?? false,
    unschedulable: node.spec?.unschedulable ?? false,
    ...(since && { since: new Date(since).toISOString() }),
  };
}

/** A node a VM can be moved to now (other than `here`): it reports and is not cordoned. */
export const canTakeVms = (node: NodeFacts, here: string | undefined) =>
  node.state === 'Ready' && !node.unschedulable && node.name !== here;

/** Nothing of the node runs anymore: it was deleted, or it is down and an admin said so. */
export const isGoneForSure = (node: NodeFacts) =>
  node.state === 'Gone' || (node.state === 'NotReady' && node.outOfService);
