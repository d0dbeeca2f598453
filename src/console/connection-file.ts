// The virt-viewer connection file (`.vv`) for a VM's SPICE or VNC display (pure), as VM-Operator
// writes it: remote-viewer reads it, connects, and deletes it (the password in it is a one-time one).
import type { V1Pod } from '@kubernetes/client-node';
import type { VirtualMachine } from '../api/virtual-machine.js';

export interface SpiceEndpoint {
  host: string;
  port: number;
  proxy?: string;
}

/**
 * Where a SPICE client reaches the VM: `spice.server` when set, else its runner pod's address (SPICE
 * listens on the pod's network; a VM-Operator pod on the host network has the node's), with
 * `spice.proxyUrl` as proxy.
 */
export function spiceEndpoint(vm: VirtualMachine, pod: V1Pod | undefined): SpiceEndpoint | string {
  const spice = vm.spec.vm.display.spice;
  if (!spice) return `VM ${vm.metadata.name} has no SPICE display (spec.vm.display.spice)`;
  const host = spice.server ?? pod?.status?.podIP;
  if (!host)
    return `VM ${vm.metadata.name} has no runner pod on a node yet (phase ${vm.status?.phase ?? 'unknown'})`;
  return { host, port: spice.port, ...(spice.proxyUrl && { proxy: spice.proxyUrl }) };
}

export function connectionFile(
  endpoint: SpiceEndpoint,
  title: string,
  password?: string,
  type: 'spice' | 'vnc' = 'spice',
): string {
  const lines = [
    '[virt-viewer]',
    `type=${type}`,
    `title=${title}`,
    `host=${endpoint.host}`,
    `port=${endpoint.port}`,
    ...(password !== undefined ? [`password=${password}`] : []),
    ...(endpoint.proxy ? [`proxy=${endpoint.proxy}`] : []),
    'delete-this-file=1',
  ];
  return `${lines.join('\n')}\n`;
}
