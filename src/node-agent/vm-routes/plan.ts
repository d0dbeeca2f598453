// What one node's network should hold for the VMs' own addresses (pure), as Deckhouse's
// vm-route-forge: every node routes each running VM's /32 to where its guest runs (the runner pod
// on this node, or that pod's node), and each runner pod on this node with a routed NIC gets its
// tap. The VM's status names the pod its guest runs in: during a live migration it names the
// source until the target took over, so the routes switch then, never while both run.
import type { V1Pod } from '@kubernetes/client-node';
import { routedNicOf, type RoutedNic } from '../../api/vm-network.js';

/** What the plan reads of a VM: its own address and the pod it runs in. */
export interface VmView {
  metadata?: { namespace?: string; name?: string };
  status?: { ipAddress?: string; virtualMachineIPAddressName?: string; runnerPod?: { name?: string } };
}

export interface PodTap {
  /** The pod, to find its network namespace. */
  uid: string;
  namespace: string;
  name: string;
  nic: RoutedNic;
}

export interface NodeNetworkPlan {
  taps: PodTap[];
  /** Address → next hop (a pod's address on this node, a node's address elsewhere). */
  routes: Map<string, string>;
}

const alive = (pod: V1Pod) =>
  !pod.metadata?.deletionTimestamp && pod.status?.phase !== 'Succeeded' && pod.status?.phase !== 'Failed';

export function planNodeNetwork(
  node: string,
  pods: readonly V1Pod[],
  vms: readonly VmView[],
): NodeNetworkPlan {
  const podByName = new Map(pods.map((pod) => [`${pod.metadata?.namespace}/${pod.metadata?.name}`, pod]));
  const taps: PodTap[] = [];
  for (const pod of pods) {
    const nic = routedNicOf(pod.metadata?.annotations);
    if (!nic || pod.spec?.nodeName !== node || !pod.status?.podIP || !alive(pod)) continue;
    taps.push({
      uid: pod.metadata!.uid!,
      namespace: pod.metadata!.namespace!,
      name: pod.metadata!.name!,
      nic,
    });
  }
  const routes = new Map<string, string>();
  for (const vm of vms) {
    const address = vm.status?.virtualMachineIPAddressName ? vm.status.ipAddress : undefined;
    const podName = vm.status?.runnerPod?.name;
    if (!address || !podName) continue;
    const pod = podByName.get(`${vm.metadata?.namespace}/${podName}`);
    // Only a pod whose tap carries this address (an older pod of the VM may run QEMU's NAT).
    if (!pod || routedNicOf(pod.metadata?.annotations)?.address !== address || !alive(pod)) continue;
    const nextHop = pod.spec?.nodeName === node ? pod.status?.podIP : pod.status?.hostIP;
    if (nextHop) routes.set(address, nextHop);
  }
  return { taps, routes };
}

/** The route changes that make `current` (this agent's routes now) what `plan` says. */
export function routeChanges(
  current: ReadonlyMap<string, string>,
  planned: ReadonlyMap<string, string>,
): { replace: Array<[string, string]>; remove: string[] } {
  return {
    replace: [...planned].filter(([address, via]) => current.get(address) !== via),
    remove: [...current.keys()].filter((address) => !planned.has(address)),
  };
}
