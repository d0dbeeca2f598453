// What one node's network should hold for the VMs' own addresses (pure), as Deckhouse's
// vm-route-forge: every node routes each running VM's /32 to where its guest runs (the runner pod
// on this node, or that pod's node), and each runner pod on this node with a routed NIC gets its
// tap. The VM's status names the pod its guest runs in: during a live migration it names the
// source until the target took over. That status comes a few hundred ms after the guest resumed on
// the target, so the agents of the two nodes switch on what they see themselves first (Handover):
// the target's node once the guest sent on the target's tap, the source's node once the source's
// QEMU is gone. Neither happens while both run: the guest runs in one QEMU at a time.
import type { V1Pod } from '@kubernetes/client-node';
import { routedNicOf, type RoutedNic } from '../../api/vm-network.js';

/** What the plan reads of a VM: its own address and the pod it runs in. */
export interface VmView {
  metadata?: { namespace?: string; name?: string; uid?: string };
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
  /**
   * This node's pods of a VM with two (a live migration): the one the status names (the source,
   * as a rule) and the other; the agent watches them for the handover.
   */
  moving: Array<{ named: PodTap; other: PodTap; otherIsLocal: boolean; namedIsLocal: boolean }>;
  /** The pods (uids) the VMs' statuses name. */
  named: string[];
}

/** What this node's agent saw of its pods of moving VMs (by pod uid). */
export interface Handover {
  /** The guest sent on this (target) pod's tap: it runs there. */
  runsIn: ReadonlySet<string>;
  /** This (source) pod's QEMU is gone. */
  leftFrom: ReadonlySet<string>;
}

const NO_HANDOVER: Handover = { runsIn: new Set(), leftFrom: new Set() };

const alive = (pod: V1Pod) =>
  !pod.metadata?.deletionTimestamp && pod.status?.phase !== 'Succeeded' && pod.status?.phase !== 'Failed';

export function planNodeNetwork(
  node: string,
  pods: readonly V1Pod[],
  vms: readonly VmView[],
  handover: Handover = NO_HANDOVER,
): NodeNetworkPlan {
  const podByName = new Map(pods.map((pod) => [`${pod.metadata?.namespace}/${pod.metadata?.name}`, pod]));
  const tapOf = (pod: V1Pod): PodTap => ({
    uid: pod.metadata!.uid!,
    namespace: pod.metadata!.namespace!,
    name: pod.metadata!.name!,
    nic: routedNicOf(pod.metadata?.annotations)!,
  });
  const taps = pods
    .filter((pod) => routedNicOf(pod.metadata?.annotations) && pod.spec?.nodeName === node)
    .filter((pod) => pod.status?.podIP && alive(pod))
    .map(tapOf);
  const routes = new Map<string, string>();
  const moving: NodeNetworkPlan['moving'] = [];
  const namedUids: string[] = [];
  for (const vm of vms) {
    const address = vm.status?.virtualMachineIPAddressName ? vm.status.ipAddress : undefined;
    const podName = vm.status?.runnerPod?.name;
    if (!address || !podName) continue;
    const named = podByName.get(`${vm.metadata?.namespace}/${podName}`);
    // Only a pod whose tap carries this address (an older pod of the VM may run QEMU's NAT).
    if (!named || routedNicOf(named.metadata?.annotations)?.address !== address || !alive(named)) continue;
    namedUids.push(named.metadata!.uid!);
    const other = pods.find(
      (pod) =>
        pod !== named &&
        pod.metadata?.namespace === vm.metadata?.namespace &&
        // The VM's own (a pod someone else made cannot pose as its target).
        pod.metadata?.ownerReferences?.some((owner) => owner.uid === vm.metadata?.uid) &&
        pod.status?.podIP &&
        alive(pod) &&
        routedNicOf(pod.metadata?.annotations)?.address === address,
    );
    let runsIn = named;
    if (other) {
      const [namedIsLocal, otherIsLocal] = [named.spec?.nodeName === node, other.spec?.nodeName === node];
      if (namedIsLocal || otherIsLocal)
        moving.push({ named: tapOf(named), other: tapOf(other), namedIsLocal, otherIsLocal });
      const uid = (pod: V1Pod) => pod.metadata!.uid!;
      if (handover.runsIn.has(uid(other)) || handover.leftFrom.has(uid(named))) runsIn = other;
    }
    const nextHop = runsIn.spec?.nodeName === node ? runsIn.status?.podIP : runsIn.status?.hostIP;
    if (nextHop) routes.set(address, nextHop);
  }
  return { taps, routes, moving, named: namedUids };
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
