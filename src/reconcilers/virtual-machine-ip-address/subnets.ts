// The VM subnets (the chart's virtualMachineCIDRs) and the addresses in them (pure). As Deckhouse:
// every address of a subnet may be a VM's but its first (the network) and its last (broadcast).
import { isIPv4 } from 'node:net';
import { z } from 'zod';

export interface Subnet {
  cidr: string;
  /** The network and broadcast addresses as numbers. */
  network: number;
  broadcast: number;
}

const toNumber = (address: string) =>
  address.split('.').reduce((value, octet) => value * 256 + Number(octet), 0);
const toAddress = (value: number) =>
  [24, 16, 8, 0].map((shift) => Math.floor(value / 2 ** shift) % 256).join('.');

/** A subnet from `a.b.c.d/n`; its problem as a message when it is none. */
export function parseSubnet(cidr: string): Subnet | string {
  const match = /^([0-9.]+)\/(\d{1,2})$/.exec(cidr);
  const bits = Number(match?.[2]);
  if (!match || !isIPv4(match[1]!) || bits > 32) return `${cidr} is not an IPv4 subnet (a.b.c.d/n)`;
  const size = 2 ** (32 - bits);
  const network = toNumber(match[1]!);
  if (network % size !== 0)
    return `${cidr} is not a subnet's first address: did you mean ${toAddress(network - (network % size))}/${bits}?`;
  return { cidr, network, broadcast: network + size - 1 };
}

/** Why `address` cannot be a VM's, or undefined when it can. */
export function addressProblem(address: string, subnets: readonly Subnet[]): string | undefined {
  if (subnets.length === 0)
    return 'no VM subnets are configured (the chart value virtualMachineCIDRs, the manager flag --vm-cidr)';
  if (!isIPv4(address)) return `${address} is not an IPv4 address`;
  const value = toNumber(address);
  const subnet = subnets.find((s) => value >= s.network && value <= s.broadcast);
  const all = subnets.map((s) => s.cidr).join(', ');
  if (!subnet) return `${address} is in none of the VM subnets (${all})`;
  if (value === subnet.network) return `${address} is the network address of ${subnet.cidr}`;
  if (value === subnet.broadcast) return `${address} is the broadcast address of ${subnet.cidr}`;
  return undefined;
}

/** How many addresses the subnets give VMs. */
export const usableAddresses = (subnets: readonly Subnet[]) =>
  subnets.reduce((sum, s) => sum + Math.max(0, s.broadcast - s.network - 1), 0);

/**
 * A free address of the subnets: the first one not `taken` from a random start, so replicas that
 * pick at once rarely pick the same (the lease's create decides when they do).
 */
export function pickFreeAddress(
  subnets: readonly Subnet[],
  taken: ReadonlySet<string>,
  random: () => number = Math.random,
): string | undefined {
  const total = usableAddresses(subnets);
  const start = Math.floor(random() * total);
  for (let i = 0; i < total; i++) {
    let index = (start + i) % total;
    for (const subnet of subnets) {
      const usable = Math.max(0, subnet.broadcast - subnet.network - 1);
      if (index < usable) {
        const address = toAddress(subnet.network + 1 + index);
        if (!taken.has(address)) return address;
        break;
      }
      index -= usable;
    }
  }
  return undefined;
}

/** A manager option: one VM subnet, refused with its problem when it is none. */
export const VmCidr = z.string().superRefine((cidr, context) => {
  const subnet = parseSubnet(cidr);
  if (typeof subnet === 'string') context.addIssue({ code: 'custom', message: subnet });
});

/** The subnets of options VmCidr checked. */
export const parsedSubnets = (cidrs: readonly string[]) =>
  cidrs.map((cidr) => parseSubnet(cidr)).filter((subnet): subnet is Subnet => typeof subnet !== 'string');
