// The reconcile of one VirtualMachineIPAddress key: hold a lease for it — on any free address of the
// VM subnets (Auto) or on its staticIP (Static) — and say which VM it is attached to. The lease's
// name is its address, so of two replicas (or claims) that want one address only one create
// succeeds; the other picks again (Auto) or reports the holder (Static).
import { isDeepStrictEqual } from 'node:util';
import type { KubernetesObject } from '@kubernetes/client-node';
import {
  IP_ADDRESS_KIND,
  LEASE_API_REF,
  LEASE_KIND,
  VirtualMachineIPAddress,
  VirtualMachineIPAddressLease,
  type IpAddressStatus,
  leaseAddress,
  ipAddressApiRef,
  leaseName,
} from '../../api/virtual-machine-ip-address.js';
import { GROUP, KIND, VERSION } from '../../api/virtual-machine.js';
import { isConflict, readOptional, type KubeClients } from '../../kube/clients.js';
import { mergePatch, statusPatch } from '../../kube/merge-patch.js';
import type { ObjectCache } from '../../kube/object-cache.js';
import type { HandlerResult } from '../../queue/index.js';
import type { Logger } from '../../util/logger.js';
import { nextCondition, type ConditionFacts } from '../conditions.js';
import { attachedVm } from './attachment.js';
import { addressProblem, pickFreeAddress, usableAddresses, type Subnet } from './subnets.js';

export interface IpAddressReconcilerOptions {
  clients: KubeClients;
  cache: ObjectCache;
  /** The VM subnets addresses are leased from. */
  subnets: readonly Subnet[];
  logger: Logger;
  now?: () => Date;
  random?: () => number;
}

/** Picks of a free address per reconcile, when other replicas lease the picked ones first. */
const PICK_TRIES = 8;
/** A claim that waits for a free address looks again this often (lease deletions also wake it). */
const WAITING_RECHECK_MS = 60_000;

type Leasing = { address: string } | { problem: ConditionFacts & { status: 'False' } };

export function createIpAddressReconciler(options: IpAddressReconcilerOptions) {
  const { clients, cache, subnets, logger } = options;
  const now = options.now ?? (() => new Date());

  const cachedLeases = () =>
    cache
      .list<KubernetesObject>(LEASE_KIND, undefined)
      .flatMap((lease) => VirtualMachineIPAddressLease.safeParse(lease).data ?? []);

  /** The lease of `address`, from the cache, else (made moments ago, or the cache lags) the apiserver. */
  async function readLease(address: string): Promise<VirtualMachineIPAddressLease | undefined> {
    const name = leaseName(address);
    const cached = cachedLeases().find((lease) => lease.metadata.name === name);
    if (cached) return cached;
    const read = await readOptional(() =>
      clients.customObjects.getClusterCustomObject({ ...LEASE_API_REF, name }),
    );
    return read ? VirtualMachineIPAddressLease.parse(read) : undefined;
  }

  /** Creates the lease of `address` for `vmip`; false when it exists already. */
  async function createLease(vmip: VirtualMachineIPAddress, address: string): Promise<boolean> {
    const { namespace, name, uid } = vmip.metadata;
    try {
      await clients.customObjects.createClusterCustomObject({
        ...LEASE_API_REF,
        body: {
          apiVersion: `${GROUP}/${VERSION}`,
          kind: LEASE_KIND,
          metadata: { name: leaseName(address) },
          spec: { virtualMachineIPAddressRef: { namespace, name, uid } },
        },
      });
      logger.info({ address, vmip: `${namespace}/${name}` }, 'leased an address');
      return true;
    } catch (err) {
      if (isConflict(err)) return false;
      throw err;
    }
  }

  const leasedTo = (lease: VirtualMachineIPAddressLease, vmip: VirtualMachineIPAddress) =>
    lease.spec.virtualMachineIPAddressRef.uid === vmip.metadata.uid;

  const problem = (reason: string, message: string): Leasing => ({
    problem: { type: 'Bound', status: 'False', reason, message },
  });

  /** The address `vmip` holds, or leases now, or why it cannot. */
  async function lease(vmip: VirtualMachineIPAddress): Promise<Leasing> {
    const { namespace } = vmip.metadata;
    const wanted = vmip.spec.type === 'Static' ? vmip.spec.staticIP! : vmip.status?.address;
    if (wanted) {
      const existing = await readLease(wanted);
      if (existing && leasedTo(existing, vmip)) return { address: wanted };
      // No lease (never made, or deleted under it): made again, while the address is still valid.
      const invalid = existing ? undefined : addressProblem(wanted, subnets);
      if (!existing && !invalid) {
        if (await createLease(vmip, wanted)) return { address: wanted };
        throw new Error(`the lease of ${wanted} was made by another meanwhile: looking again`);
      }
      const holder = existing?.spec.virtualMachineIPAddressRef;
      if (vmip.spec.type === 'Static') {
        if (!existing || !holder) return problem('InvalidAddress', invalid!);
        if (holder.namespace !== namespace)
          return problem(
            'LeasedToAnotherNamespace',
            `${wanted} is leased to namespace ${holder.namespace}${existing.status?.phase === 'Released' ? ' (released, held for it a while)' : ''}`,
          );
        if (existing.status?.phase !== 'Released')
          return problem('AddressInUse', `${wanted} is held by VirtualMachineIPAddress ${holder.name}`);
        await takeOver(existing, vmip);
        return { address: wanted };
      }
      // An Auto claim whose address another holds now (its lease was deleted and taken): pick anew.
    }
    const leased = cachedLeases();
    const own = leased.find((l) => leasedTo(l, vmip));
    if (own) return { address: leaseAddress(own.metadata.name) };
    if (subnets.length === 0) return problem('NoSubnets', addressProblem('0.0.0.0', subnets)!);
    const taken = new Set(leased.map((l) => leaseAddress(l.metadata.name)));
    for (let tries = 0; tries < PICK_TRIES; tries++) {
      const address = pickFreeAddress(subnets, taken, options.random);
      if (!address)
        return problem(
          'PoolExhausted',
          `no free address in ${subnets.map((s) => s.cidr).join(', ')}: all ${usableAddresses(subnets)} are leased`,
        );
      if (await createLease(vmip, address)) return { address };
      taken.add(address);
    }
    throw new Error(`the ${PICK_TRIES} addresses picked were leased by others meanwhile: looking again`);
  }

  /** A released lease of the claim's namespace goes to the claim (refused if it changed meanwhile). */
  async function takeOver(lease: VirtualMachineIPAddressLease, vmip: VirtualMachineIPAddress) {
    const { namespace, name, uid } = vmip.metadata;
    await clients.customObjects.patchClusterCustomObject(
      {
        ...LEASE_API_REF,
        name: lease.metadata.name,
        body: {
          metadata: { resourceVersion: lease.metadata.resourceVersion },
          spec: { virtualMachineIPAddressRef: { namespace, name, uid } },
        },
      },
      mergePatch,
    );
    logger.info({ lease: lease.metadata.name, vmip: `${namespace}/${name}` }, 'took over a released lease');
  }

  return async (key: string): Promise<HandlerResult> => {
    const [namespace, name] = key.slice('vmip:'.length).split('/') as [string, string];
    const cached = cache.get<KubernetesObject>(IP_ADDRESS_KIND, namespace, name);
    if (!cached || cached.metadata?.deletionTimestamp) return;
    let vmip = VirtualMachineIPAddress.parse(cached);
    // Before an Auto claim picks an address: the apiserver's copy, in case a write of this claim's
    // address (by another replica, or before a restart) has not reached the cache yet.
    if (vmip.spec.type === 'Auto' && !vmip.status?.address) {
      const read = await readOptional(() =>
        clients.customObjects.getNamespacedCustomObject({ ...ipAddressApiRef(namespace), name }),
      );
      if (!read) return;
      vmip = VirtualMachineIPAddress.parse(read);
    }
    const leasing = await lease(vmip);
    const address = 'address' in leasing ? leasing.address : undefined;
    const vm = address
      ? attachedVm(name, cache.list(KIND, namespace), vmip.status?.virtualMachineName)
      : undefined;
    const at = now();
    const conditions = vmip.status?.conditions;
    const status: IpAddressStatus = {
      ...(address && { address }),
      ...(vm && { virtualMachineName: vm }),
      phase: vm ? 'Attached' : address ? 'Bound' : 'Pending',
      observedGeneration: vmip.metadata.generation,
      conditions: [
        nextCondition(
          conditions,
          'problem' in leasing
            ? leasing.problem
            : {
                type: 'Bound',
                status: 'True',
                reason: 'Leased',
                message: `leased as ${leaseName(address!)}`,
              },
          at,
        ),
        nextCondition(
          conditions,
          vm
            ? { type: 'Attached', status: 'True', reason: 'Attached', message: `attached to VM ${vm}` }
            : {
                type: 'Attached',
                status: 'False',
                reason: address ? 'NoVirtualMachine' : 'NotBound',
                message: address ? 'no VM of the namespace names it' : 'it has no address yet',
              },
          at,
        ),
      ],
    };
    if (!isDeepStrictEqual(JSON.parse(JSON.stringify(status)), vmip.status ?? {}))
      // Guarded by the resourceVersion read: a write from an older copy is refused and retried.
      await clients.customObjects.patchNamespacedCustomObjectStatus(
        {
          ...ipAddressApiRef(namespace),
          name,
          body: {
            metadata: { resourceVersion: vmip.metadata.resourceVersion },
            status: statusPatch(vmip.status, status),
          },
        },
        mergePatch,
      );
    return address ? undefined : { requeueAfter: WAITING_RECHECK_MS };
  };
}
