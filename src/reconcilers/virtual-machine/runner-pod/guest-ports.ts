// A guest port answers at the same port of the runner pod (QEMU's forwarding, or the runner's
// relay for a VM's own address): it cannot be a port the runner pod listens on itself (pure).
import type { VirtualMachine } from '../../../api/virtual-machine.js';
import { RUNNER_METRICS_PORT, usesHostNetwork } from './pod.js';

/** SpecValid's words for guest ports that are the runner pod's own ports. */
export function guestPortErrors(vm: VirtualMachine): string[] {
  const own = new Map<number, string>();
  if (!usesHostNetwork(vm)) own.set(RUNNER_METRICS_PORT, "the runner's metrics");
  const spice = vm.spec.vm.display?.spice;
  if (spice) own.set(spice.port, 'the SPICE display (spec.vm.display.spice.port)');
  const vnc = vm.spec.vm.display?.vnc;
  if (vnc) own.set(vnc.port, 'the VNC display (spec.vm.display.vnc.port)');
  return vm.spec.vm.networks.flatMap((network, index) =>
    (network.user?.ports ?? [])
      .filter((port) => port.protocol === 'TCP' && own.has(port.port))
      .map(
        (port) =>
          `spec.vm.networks[${index}].user.ports: TCP ${port.port} is the runner pod's port for ${own.get(port.port)}: forward another`,
      ),
  );
}
