// The VirtualMachineIPAddress vmop makes for a VM that names none, where VM subnets are configured
// (address/ip-address.ts); its own reconcile leases the address (virtual-machine-ip-address/).
import { ipAddressApiRef } from '../../../api/virtual-machine-ip-address.js';
import { isConflict } from '../../../kube/clients.js';
import type { Step } from '../pipeline.js';
import type { VmState } from '../vm-state.js';

export const ipAddressStep: Step<VmState> = {
  name: 'IP address',
  owned: true,
  async run(state) {
    const claim = state.plan.ipAddress.create;
    if (!claim) return;
    try {
      await state.io.clients.customObjects.createNamespacedCustomObject({
        ...ipAddressApiRef(claim.metadata.namespace),
        body: claim,
      });
    } catch (err) {
      // Made by another replica (or an earlier reconcile) and not cached yet: its watch brings the key back.
      if (isConflict(err)) return;
      throw err;
    }
    return { writes: [`VirtualMachineIPAddress ${claim.metadata.name}`] };
  },
};
