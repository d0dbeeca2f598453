// A VM's own IP address, as Deckhouse's: a namespaced VirtualMachineIPAddress (vmip) asks for one —
// any free address of the subnets the admin configured (Auto) or a named one (Static) — and a
// cluster-wide VirtualMachineIPAddressLease (vmipl) named after the address holds it. The lease's
// name is the address, so no two claims can hold one address: the apiserver refuses the second
// create, whichever manager replica makes it. A lease whose claim went stays with the claim's
// namespace for a while (the hold), so the address can be asked for again there.
import { z } from 'zod';
import { Condition, GROUP, ObjectMeta, VERSION } from './virtual-machine.js';

export const IP_ADDRESS_KIND = 'VirtualMachineIPAddress';
export const IP_ADDRESS_PLURAL = 'virtualmachineipaddresses';
export const IP_ADDRESS_SINGULAR = 'virtualmachineipaddress';
export const IP_ADDRESS_SHORT_NAMES = ['vmip', 'vmips'];

export const LEASE_KIND = 'VirtualMachineIPAddressLease';
export const LEASE_PLURAL = 'virtualmachineipaddressleases';
export const LEASE_SINGULAR = 'virtualmachineipaddresslease';
export const LEASE_SHORT_NAMES = ['vmipl', 'vmipls'];

/** A dotted-quad IPv4 address (the CRD checks the form; vmop checks it against the subnets). */
const Ipv4 = z.ipv4();

export const IpAddressSpec = z
  .object({
    type: z
      .enum(['Auto', 'Static'])
      .default('Auto')
      .describe('Auto: any free address of the VM subnets; Static: the address in staticIP.'),
    staticIP: Ipv4.optional().describe('The address of type Static, in one of the VM subnets.'),
  })
  .meta({
    'x-kubernetes-validations': [
      {
        rule: "self.type == 'Static' ? has(self.staticIP) : !has(self.staticIP)",
        message: 'staticIP is required for type Static and not allowed for type Auto',
      },
      {
        rule: 'self == oldSelf',
        message: 'the spec of a VirtualMachineIPAddress is immutable: make another one for another address',
      },
    ],
  });

export const IpAddressPhase = z.enum(['Pending', 'Bound', 'Attached']);

export const IpAddressStatus = z.object({
  /** The leased address. */
  address: z.string().optional(),
  /** The VM the address is attached to (one at a time). */
  virtualMachineName: z.string().optional(),
  phase: IpAddressPhase.optional(),
  conditions: z.array(Condition).optional(),
  observedGeneration: z.number().int().optional(),
});

export type IpAddressStatus = z.infer<typeof IpAddressStatus>;

export const VirtualMachineIPAddress = z.object({
  apiVersion: z.literal(`${GROUP}/${VERSION}`),
  kind: z.literal(IP_ADDRESS_KIND),
  metadata: ObjectMeta,
  spec: IpAddressSpec,
  status: IpAddressStatus.optional(),
});
export type VirtualMachineIPAddress = z.infer<typeof VirtualMachineIPAddress>;

export const LeaseSpec = z.object({
  virtualMachineIPAddressRef: z
    .object({
      namespace: z.string().min(1).max(63),
      name: z.string().min(1).max(253),
      /** Tells a claim made again under the same name from the one that held the lease. */
      uid: z.string().max(64).optional(),
    })
    .describe('The VirtualMachineIPAddress that holds (or, Released, last held) the address.'),
});

export const LeaseStatus = z.object({
  /** Bound: its claim exists; Released: it went, and the address is kept for its namespace until the hold ends. */
  phase: z.enum(['Bound', 'Released']).optional(),
  releasedAt: z.string().optional(),
  conditions: z.array(Condition).optional(),
});

export const VirtualMachineIPAddressLease = z.object({
  apiVersion: z.literal(`${GROUP}/${VERSION}`),
  kind: z.literal(LEASE_KIND),
  metadata: ObjectMeta,
  spec: LeaseSpec,
  status: LeaseStatus.optional(),
});
export type VirtualMachineIPAddressLease = z.infer<typeof VirtualMachineIPAddressLease>;

/** Where the apiserver serves a namespace's claims, and the leases. */
export const ipAddressApiRef = (namespace: string) => ({
  group: GROUP,
  version: VERSION,
  plural: IP_ADDRESS_PLURAL,
  namespace,
});
export const LEASE_API_REF = { group: GROUP, version: VERSION, plural: LEASE_PLURAL };

/** The work-queue keys. */
export const ipAddressKey = (namespace: string, name: string) => `vmip:${namespace}/${name}`;
export const leaseKey = (name: string) => `vmipl:${name}`;

/** A lease is named after its address: 10.66.10.14 is held by ip-10-66-10-14. */
export const leaseName = (address: string) => `ip-${address.replaceAll('.', '-')}`;
export const leaseAddress = (name: string) => name.replace(/^ip-/, '').replaceAll('-', '.');
