// Which VM holds which address (pure), read only from what tenants cannot write: a
// VirtualMachineIPAddressLease is cluster-wide and made by the managers; it names the claim that
// holds its address, and that claim's status (the managers' too) names the VM it is attached to.
// Nothing a runner, a guest or a pod says counts: a tenant can route only her own addresses.
import { leaseAddress } from '../../api/virtual-machine-ip-address.js';
import { addressProblem, type Subnet } from '../../reconcilers/virtual-machine-ip-address/subnets.js';

/** What is read of a lease. */
export interface LeaseView {
  metadata?: { name?: string };
  spec?: { virtualMachineIPAddressRef?: { namespace?: string; name?: string; uid?: string } };
  status?: { phase?: string };
}

/** What is read of a VirtualMachineIPAddress (a claim). */
export interface ClaimView {
  metadata?: { namespace?: string; name?: string; uid?: string };
  status?: { address?: string; virtualMachineName?: string };
}

/** The address each VM holds, by `namespace/name` of the VM. */
export function leasedAddresses(
  leases: readonly LeaseView[],
  claims: readonly ClaimView[],
  subnets: readonly Subnet[],
): Map<string, string> {
  const claimOf = new Map(
    claims.map((claim) => [`${claim.metadata?.namespace}/${claim.metadata?.name}`, claim]),
  );
  const held = new Map<string, string>();
  for (const lease of leases) {
    const ref = lease.spec?.virtualMachineIPAddressRef;
    if (!lease.metadata?.name || !ref?.namespace || lease.status?.phase === 'Released') continue;
    const address = leaseAddress(lease.metadata.name);
    if (addressProblem(address, subnets)) continue;
    const claim = claimOf.get(`${ref.namespace}/${ref.name}`);
    // A claim made again under the same name holds nothing until its own lease says so.
    if (!claim || (ref.uid && claim.metadata?.uid !== ref.uid)) continue;
    const vm = claim.status?.virtualMachineName;
    if (claim.status?.address !== address || !vm) continue;
    const key = `${ref.namespace}/${vm}`;
    if (!held.has(key)) held.set(key, address);
  }
  return held;
}
