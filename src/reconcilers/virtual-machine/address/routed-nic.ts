// Which NIC carries a VM's own address (pure): its first `user` network, backed by a tap in its
// runner pod instead of QEMU's NAT (src/api/vm-network.ts). A VM without one, or with host-bridge
// taps (its pod is on the node's network), keeps its address reserved but has no NIC with it.
import { routedNicMac, type RoutedNic } from '../../../api/vm-network.js';
import type { VirtualMachine } from '../../../api/virtual-machine.js';

/** The index in spec.vm.networks of the NIC that carries the address. */
export const routedNetworkIndex = (vm: VirtualMachine) =>
  vm.spec.vm.networks.findIndex((network) => network.user);

/** The routed NIC of a VM that has its own address, or undefined. */
export function routedNicOfVm(vm: VirtualMachine, address: string | undefined): RoutedNic | undefined {
  if (!address || routedNetworkIndex(vm) < 0 || vm.spec.vm.networks.some((network) => network.tap))
    return undefined;
  return { address, mac: routedNicMac(vm.metadata.uid ?? vm.metadata.name) };
}
