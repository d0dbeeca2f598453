// What one node's network should hold for the VMs' own addresses (pure), as Deckhouse's
// vm-route-forge: every node routes each running VM's /32 to where its guest runs (the runner pod
// on this node, or that pod's node), and each runner pod on this node with a routed NIC gets its
// tap. Which VM holds an address comes from its lease (leased-addresses.ts), which pod is the VM's
// from the pod's controller reference to the VM, and where the guest runs from the VM's status:
// nothing a tenant may edit (a pod's annotations, a guest's or runner's word) routes an address
// that is not hers. The status names the pod the guest runs in: during a live migration it names the
// source until the target took over. That status comes a few hundred ms after the guest resumed on
// the target, so the agents of the two nodes switch on what they see themselves first (Handover):
// the target's node once the guest sent on the target's tap, the source's node once the source's
// QEMU is gone. Neither happens while both run: the guest runs in one QEMU at a time.
import type { V1Pod } from '@kubernetes/client-node';
import { routedNicMac, routedNicOf, type RoutedNic } from '../../api/vm-network.js';
import { KIND } from '../../api/virtual-machine.js';

/** What the plan reads of a VM: who it is and the pod it runs in (status, the managers'). */
export interface VmView {
  metadata?: { namespace?: string; name?: string; uid?: string };
  status?: { runnerPod?: { name?: string } };
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

/**
 * `addresses`: the address each VM holds, by `namespace/name` (leasedAddresses). A pod gets a tap
 * or a route only if it is alive, the VM's by its controller reference, and made with the routed
 * NIC of that address (its annotation, vmop's: a tenant who edits it loses her own tap, no more).
 */
export function planNodeNetwork(
  node: string,
  pods: readonly V1Pod[],
  vms: readonly VmView[],
  addresses: ReadonlyMap<string, string>,
  handover: Handover = NO_HANDOVER,
): NodeNetworkPlan {
  const vmByUid = new Map(vms.filter((vm) => vm.metadata?.uid).map((vm) => [vm.metadata!.uid!, vm]));
  /** The VM a pod was made for, with the address it holds, where the pod may carry it. */
  const ownerOf = (pod: V1Pod) => {
    const owner = pod.metadata?.ownerReferences?.find((ref) => ref.controller && ref.kind === KIND);
    const vm = owner && vmByUid.get(owner.uid);
    if (!vm || vm.metadata?.namespace !== pod.metadata?.namespace) return undefined;
    const address = addresses.get(`${vm.metadata?.namespace}/${vm.metadata?.name}`);
    if (!address || routedNicOf(pod.metadata?.annotations)?.address !== address) return undefined;
    return { vm, nic: { address, mac: routedNicMac(vm.metadata!.uid!) } };
  };
  /** The live pods that carry their VM's address, each with its VM and its tap, found once. */
  const carriers = pods.flatMap((pod) => {
    const owner = pod.status?.podIP && alive(pod) ? ownerOf(pod) : undefined;
    if (!owner) return [];
    const tap: PodTap = {
      uid: pod.metadata!.uid!,
      namespace: pod.metadata!.namespace!,
      name: pod.metadata!.name!,
      nic: owner.nic,
    };
    return [{ pod, vm: owner.vm, tap }];
  });
  const taps = carriers.filter(({ pod }) => pod.spec?.nodeName === node).map(({ tap }) => tap);
  const routes = new Map<string, string>();
  const moving: NodeNetworkPlan['moving'] = [];
  const namedUids: string[] = [];
  for (const vm of vms) {
    const ofVm = carriers.filter((carrier) => carrier.vm === vm);
    const namedCarrier = ofVm.find(({ pod }) => pod.metadata?.name === vm.status?.runnerPod?.name);
    if (!namedCarrier) continue;
    const named = namedCarrier.pod;
    const address = namedCarrier.tap.nic.address;
    namedUids.push(named.metadata!.uid!);
    const otherCarrier = ofVm.find((carrier) => carrier !== namedCarrier);
    const other = otherCarrier?.pod;
    let runsIn = named;
    if (other) {
      const [namedIsLocal, otherIsLocal] = [named.spec?.nodeName === node, other.spec?.nodeName === node];
      if (namedIsLocal || otherIsLocal)
        moving.push({ named: namedCarrier.tap, other: otherCarrier!.tap, namedIsLocal, otherIsLocal });
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
