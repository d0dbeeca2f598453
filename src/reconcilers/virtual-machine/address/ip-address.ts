// A VM's own IP address (pure): the VirtualMachineIPAddress it names, or the one vmop makes for it
// where VM subnets are configured; the VM starts once that address is attached to it.
import type { V1ObjectMeta } from '@kubernetes/client-node';
import { IP_ADDRESS_KIND, type VirtualMachineIPAddress } from '../../../api/virtual-machine-ip-address.js';
import { API_VERSION, type VirtualMachine } from '../../../api/virtual-machine.js';
import { autoIpAddressName, ipAddressNameOf } from '../../virtual-machine-ip-address/attachment.js';
import { ownerReference, vmLabels } from '../naming.js';

/** The claim vmop makes for a VM: its metadata has an owner reference, which the schema's does not keep. */
export interface AutoClaim {
  apiVersion: string;
  kind: string;
  metadata: V1ObjectMeta & { name: string; namespace: string };
  spec: { type: 'Auto' };
}

export interface IpAddressPlan {
  /** The VirtualMachineIPAddress the VM has (or will have once made). */
  name?: string;
  /** The VM's address, once attached to it. */
  address?: string;
  /** The claim vmop makes for the VM (Auto): it does not exist yet. */
  create?: AutoClaim;
  /** Why the VM cannot start yet. */
  waiting?: { reason: string; message: string };
}

/** `enabled`: VM subnets are configured, so every VM gets an address. */
export function planIpAddress(
  vm: VirtualMachine,
  claim: VirtualMachineIPAddress | undefined,
  enabled: boolean,
): IpAddressPlan {
  const named = vm.spec.vm.virtualMachineIPAddressName;
  if (!named && !enabled) return {};
  const name = ipAddressNameOf(vm)!;
  const waiting = (message: string) => ({ name, waiting: { reason: 'WaitingForIPAddress', message } });
  if (!claim) {
    if (named) return waiting(`VirtualMachineIPAddress ${named} does not exist`);
    return {
      ...waiting(`waiting for VirtualMachineIPAddress ${name} to lease an address`),
      create: autoClaim(vm),
    };
  }
  const { status } = claim;
  if (status?.address && status.virtualMachineName === vm.metadata.name)
    return { name, address: status.address };
  if (status?.virtualMachineName)
    return waiting(`VirtualMachineIPAddress ${name} is attached to VM ${status.virtualMachineName}`);
  const bound = status?.conditions?.find((c) => c.type === 'Bound');
  return waiting(
    bound?.status === 'False'
      ? `VirtualMachineIPAddress ${name}: ${bound.message}`
      : `waiting for VirtualMachineIPAddress ${name} to be attached`,
  );
}

/** What vmop makes for a VM without one: owned by the VM, so it goes with it (unless its owner reference is removed). */
function autoClaim(vm: VirtualMachine): AutoClaim {
  return {
    apiVersion: API_VERSION,
    kind: IP_ADDRESS_KIND,
    metadata: {
      name: autoIpAddressName(vm.metadata.name, vm.metadata.uid!),
      namespace: vm.metadata.namespace!,
      labels: vmLabels(vm.metadata.name),
      ownerReferences: [ownerReference(vm)],
    },
    spec: { type: 'Auto' },
  };
}
