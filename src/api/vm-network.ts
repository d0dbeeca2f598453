// A VM's own IP address on the network (seed 004, as Deckhouse's vm-route-forge routes it): the
// guest's NIC is a tap in its runner pod, made by vmop's node agent; the pod routes the address to
// the tap and every node routes it to the pod. Shared by the manager (pods), the runner (DHCP) and
// the node agent (taps and routes).
import { createHash } from 'node:crypto';
import { z } from 'zod';

/** The tap in a runner pod that carries the VM's own address (QEMU opens it by name). */
export const ROUTED_TAP = 'vmop0';
/** The guest's gateway: the tap's own address in the pod, the same in every pod (link-local). */
export const ROUTED_GATEWAY = '169.254.1.1';
/**
 * The pod side's MAC, the same in every pod, so a guest that moved keeps a right ARP entry for its
 * gateway (a locally administered address).
 */
export const ROUTED_TAP_MAC = '02:76:6d:6f:70:01';
/** /dev/net/tun, for QEMU to open the tap (devices.vmop.jdrupes.org/tun, from the node agent). */
export const TUN_DEVICE = 'devices.vmop.jdrupes.org/tun';
/** The route protocol of the routes the node agent makes (`ip route … proto 118`): its own to replace and remove. */
export const VM_ROUTE_PROTOCOL = 118;

/** What a runner pod's node agent needs to make its tap: the VM's address and its NIC's MAC. */
export const RoutedNic = z.object({
  address: z.ipv4(),
  mac: z.string().regex(/^([0-9a-f]{2}:){5}[0-9a-f]{2}$/),
});
export type RoutedNic = z.infer<typeof RoutedNic>;
/** The runner pod annotation that holds its RoutedNic (JSON). */
export const ROUTED_NIC_ANNOTATION = 'vmoperator.jdrupes.org/routed-nic';

/** The routed NIC's MAC where the VM names none: fixed by the VM's uid, so it moves with the VM. */
export function routedNicMac(vmUid: string): string {
  const bytes = createHash('sha256').update(vmUid).digest().subarray(0, 5);
  return ['02', ...Array.from(bytes, (byte) => byte.toString(16).padStart(2, '0'))].join(':');
}

/** A pod's RoutedNic, where it has a valid one. */
export function routedNicOf(annotations: Record<string, string> | undefined): RoutedNic | undefined {
  const value = annotations?.[ROUTED_NIC_ANNOTATION];
  if (!value) return undefined;
  try {
    return RoutedNic.safeParse(JSON.parse(value)).data;
  } catch {
    return undefined;
  }
}
