// Where a VM may have a host-bridge tap network. Such a VM's runner pod is privileged on the node's
// network (runner-pod/pod.ts): whoever may create a VM there has the node. Only the namespaces an
// admin names (the chart's runner.hostNetworkNamespaces) may have them; every other VM uses the
// pod network (`user` networks: QEMU's NAT in the pod).
import type { VirtualMachine } from '../../../api/virtual-machine.js';

/** The spec errors of a VM with tap networks in a namespace that may not have them. */
export function hostNetworkErrors(vm: VirtualMachine, allowedNamespaces: readonly string[]): string[] {
  if (allowedNamespaces.includes(vm.metadata.namespace!)) return [];
  return vm.spec.vm.networks.flatMap((network, index) =>
    network.tap
      ? [
          `spec.vm.networks[${index}].tap: a tap network on the node's bridge ${network.tap.bridge} needs a privileged runner on the node's network, which this cluster allows only in the namespaces an admin names (the chart's runner.hostNetworkNamespaces); use a user network (the pod network) instead`,
        ]
      : [],
  );
}
