// VM IP addresses (VirtualMachineIPAddress and its lease) on a real apiserver with two manager
// replicas on one queue: auto and static addresses, their bad inputs, a full pool, the hold after
// deletion and its end, an address kept without its owner, and replicas racing for addresses.
import { CustomObjectsApi } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { installCrds } from '../../../src/devenv/install-crds.js';
import { startRedis, type RedisServer } from '../../../src/devenv/redis.js';
import { eventually } from '../../support/eventually.js';
import {
  applyError,
  createTestNamespace,
  isNotFound,
  kubectl,
  sharedKubeConfig,
} from '../../support/kube.js';
import { startManagerProcess, type ManagerProcess } from '../../support/manager-process.js';

const GROUP = { group: 'vmoperator.jdrupes.org', version: 'v1' };
/** Six addresses: .1 to .6 (.0 is the network's, .7 its broadcast). */
const SUBNET = '10.66.10.0/29';
const USABLE = ['1', '2', '3', '4', '5', '6'].map((host) => `10.66.10.${host}`);
const HOLD_SECONDS = 8;
const custom = sharedKubeConfig().makeApiClient(CustomObjectsApi);

interface Claim {
  metadata: { name: string; ownerReferences?: unknown[] };
  spec: { type: string; staticIP?: string };
  status?: {
    address?: string;
    virtualMachineName?: string;
    phase?: string;
    conditions?: Array<{ type: string; status: string; reason: string; message: string }>;
  };
}
interface Lease {
  metadata: { name: string };
  spec: { virtualMachineIPAddressRef: { namespace: string; name: string } };
  status?: { phase?: string };
}
interface Vm {
  status?: {
    ipAddress?: string;
    virtualMachineIPAddressName?: string;
    phase?: string;
    conditions?: Array<{ type: string; status: string; reason: string; message: string }>;
  };
}

describe('VM IP addresses, two replicas', () => {
  let redis: RedisServer;
  const managers: ManagerProcess[] = [];
  let ns: string;
  let other: string;

  beforeAll(async () => {
    const kubeConfig = sharedKubeConfig();
    await installCrds(kubeConfig);
    const [first, second] = [
      await createTestNamespace(kubeConfig, 'addresses'),
      await createTestNamespace(kubeConfig, 'addresses-other'),
    ];
    ns = first.name;
    other = second.name;
    redis = await startRedis();
    for (let i = 0; i < 2; i++)
      managers.push(
        startManagerProcess([
          ...['--kubeconfig', inject('kubeconfigPath'), '--redis', redis.url, '-n', `${ns},${other}`],
          ...['--vm-cidr', SUBNET, '--ip-address-hold', String(HOLD_SECONDS)],
        ]),
      );
    await Promise.all(managers.map((m) => m.waitForLog((l) => l.msg === 'manager started')));
    return async () => {
      await first.cleanup();
      await second.cleanup();
    };
  });

  afterAll(async () => {
    for (const manager of managers) await manager.stop();
    await redis?.stop();
    // The leases are cluster-wide: this file's go with it.
    const leases = (
      await custom.listClusterCustomObject({ ...GROUP, plural: 'virtualmachineipaddressleases' })
    ).items as Lease[];
    for (const lease of leases.filter((l) =>
      [ns, other].includes(l.spec.virtualMachineIPAddressRef.namespace),
    ))
      await custom
        .deleteClusterCustomObject({
          ...GROUP,
          plural: 'virtualmachineipaddressleases',
          name: lease.metadata.name,
        })
        .catch(() => undefined);
  });

  const apply = (manifest: string) => kubectl(['apply', '-f', '-'], manifest);
  const vmManifest = (name: string, namespace = ns, extra = '') =>
    `apiVersion: vmoperator.jdrupes.org/v1\nkind: VirtualMachine\nmetadata: {name: ${name}, namespace: ${namespace}}\n` +
    `spec: {vm: {state: Stopped, maximumCpus: 1, maximumRam: 256Mi${extra}}}\n`;
  const claimManifest = (name: string, staticIP?: string, namespace = ns) =>
    `apiVersion: vmoperator.jdrupes.org/v1\nkind: VirtualMachineIPAddress\nmetadata: {name: ${name}, namespace: ${namespace}}\n` +
    `spec: ${staticIP ? `{type: Static, staticIP: "${staticIP}"}` : '{type: Auto}'}\n`;
  const getVm = async (name: string, namespace = ns) =>
    (await custom.getNamespacedCustomObject({ ...GROUP, plural: 'vms', namespace, name })) as Vm;
  const getClaim = async (name: string, namespace = ns) =>
    (await custom.getNamespacedCustomObject({
      ...GROUP,
      plural: 'virtualmachineipaddresses',
      namespace,
      name,
    })) as Claim;
  const getLease = async (name: string) =>
    (await custom.getClusterCustomObject({
      ...GROUP,
      plural: 'virtualmachineipaddressleases',
      name,
    })) as Lease;
  const leaseOf = (address: string) => `ip-${address.replaceAll('.', '-')}`;
  const bound = (claim: Claim) => claim.status?.conditions?.find((c) => c.type === 'Bound');
  const ipCondition = (vm: Vm) => vm.status?.conditions?.find((c) => c.type === 'IPAddressReady');
  const deleteClaim = (name: string, namespace = ns) =>
    custom.deleteNamespacedCustomObject({ ...GROUP, plural: 'virtualmachineipaddresses', namespace, name });
  const deleteVm = (name: string, namespace = ns) =>
    custom.deleteNamespacedCustomObject({ ...GROUP, plural: 'vms', namespace, name });

  /** The addresses leased now (in the whole cluster). */
  const leasedAddresses = async () =>
    (
      (await custom.listClusterCustomObject({ ...GROUP, plural: 'virtualmachineipaddressleases' }))
        .items as Lease[]
    ).map((l) => l.metadata.name.replace(/^ip-/, '').replaceAll('-', '.'));

  /** The address of a VM once its claim is attached to it. */
  const addressOf = (name: string, namespace = ns) =>
    eventually(async () => {
      const vm = await getVm(name, namespace);
      expect(vm.status?.ipAddress).toBeDefined();
      return vm.status!.ipAddress!;
    });

  it('gives a VM an address of its own, shown by kubectl as the seed shows it', async () => {
    await apply(vmManifest('auto'));
    const address = await addressOf('auto');
    expect(USABLE).toContain(address);
    const vm = await getVm('auto');
    const claimName = vm.status!.virtualMachineIPAddressName!;
    expect(claimName).toMatch(/^auto-[0-9a-f]{5}$/);
    const claim = await getClaim(claimName);
    expect(claim.status).toMatchObject({ address, phase: 'Attached', virtualMachineName: 'auto' });
    await eventually(async () =>
      expect(await getLease(leaseOf(address))).toMatchObject({
        spec: { virtualMachineIPAddressRef: { namespace: ns, name: claimName } },
        status: { phase: 'Bound' },
      }),
    );
    expect(ipCondition(vm)).toMatchObject({ status: 'True' });
    const vms = await kubectl(['get', 'vm', 'auto', '-n', ns]);
    expect(vms.split('\n')[0]).toMatch(/PHASE\s.*NODE\s+IPADDRESS\s+AGE/);
    expect(vms).toContain(address);
    const claims = await kubectl(['get', 'vmip', '-n', ns]);
    expect(claims.split('\n')[0]).toMatch(/NAME\s+ADDRESS\s+STATUS\s+VM\s+AGE/);
    expect(claims).toMatch(
      new RegExp(`${claimName}\\s+${address.replaceAll('.', '\\.')}\\s+Attached\\s+auto`),
    );
    const leases = await kubectl(['get', 'vmipl', leaseOf(address)]);
    expect(leases.split('\n')[0]).toMatch(/NAME\s+VIRTUALMACHINEIPADDRESS\s+STATUS\s+AGE/);
    expect(leases).toContain(`"name":"${claimName}"`);
  });

  it('refuses bad static addresses with a message and leases nothing', async () => {
    expect(await applyError(claimManifest('no-ip').replace('{type: Auto}', '{type: Static}'))).toContain(
      'staticIP is required for type Static',
    );
    expect(await applyError(claimManifest('bad-ip', '10.66.10.300'))).toMatch(/staticIP/);
    for (const [name, address, message] of [
      ['outside', '10.1.2.3', `10.1.2.3 is in none of the VM subnets (${SUBNET})`],
      ['network', '10.66.10.0', `10.66.10.0 is the network address of ${SUBNET}`],
      ['broadcast', '10.66.10.7', `10.66.10.7 is the broadcast address of ${SUBNET}`],
    ] as const) {
      await apply(claimManifest(name, address));
      await eventually(async () => {
        const claim = await getClaim(name);
        expect(claim.status?.phase).toBe('Pending');
        expect(bound(claim)).toMatchObject({ status: 'False', reason: 'InvalidAddress', message });
      });
      await expect(getLease(leaseOf(address))).rejects.toSatisfy(isNotFound);
    }
  });

  it('attaches an address to one VM only, and a VM that names a taken one waits and says so', async () => {
    // An address nobody holds (the first test's VM got a random one).
    const taken = await leasedAddresses();
    const shared = USABLE.find((address) => !taken.includes(address))!;
    await apply(claimManifest('shared', shared));
    await apply(vmManifest('first', ns, ', virtualMachineIPAddressName: shared'));
    expect(await addressOf('first')).toBe(shared);
    await apply(vmManifest('second', ns, ', virtualMachineIPAddressName: shared'));
    await eventually(async () =>
      expect(ipCondition(await getVm('second'))).toMatchObject({
        status: 'False',
        message: 'VirtualMachineIPAddress shared is attached to VM first',
      }),
    );
    expect((await getVm('second')).status?.ipAddress).toBeUndefined();
    // The same address in another namespace is refused while this one holds it.
    await apply(claimManifest('elsewhere', shared, other));
    await eventually(async () =>
      expect(bound(await getClaim('elsewhere', other))).toMatchObject({
        status: 'False',
        reason: 'LeasedToAnotherNamespace',
        message: `${shared} is leased to namespace ${ns}`,
      }),
    );
    // Once the first lets it go, the second gets it.
    await deleteVm('first');
    await eventually(async () => expect((await getVm('second')).status?.ipAddress).toBe(shared));
  });

  it('keeps a deleted VM address for its namespace during the hold, then frees it', async () => {
    const address = await addressOf('auto');
    const claimName = (await getVm('auto')).status!.virtualMachineIPAddressName!;
    await deleteVm('auto');
    // Its claim goes with it (the garbage collector's work, which here waits for its discovery of the new kinds).
    await deleteClaim(claimName).catch(() => undefined);
    await eventually(async () => expect((await getLease(leaseOf(address))).status?.phase).toBe('Released'));
    // Held: another namespace cannot have it, the VM's own can, by asking for it.
    await apply(claimManifest('taken-back', address, other));
    await eventually(async () =>
      expect(bound(await getClaim('taken-back', other))).toMatchObject({
        reason: 'LeasedToAnotherNamespace',
        message: `${address} is leased to namespace ${ns} (released, held for it a while)`,
      }),
    );
    await apply(claimManifest('taken-back', address));
    await eventually(async () => expect((await getClaim('taken-back')).status?.phase).toBe('Bound'));
    expect((await getLease(leaseOf(address))).spec.virtualMachineIPAddressRef.name).toBe('taken-back');
    // Released again, and past the hold the lease goes: the other namespace's claim gets it.
    await deleteClaim('taken-back');
    await eventually(
      async () => expect((await getClaim('taken-back', other)).status?.address).toBe(address),
      HOLD_SECONDS * 1000 + 60_000,
    );
  });

  it('keeps an address whose owner reference was removed, when its VM goes', async () => {
    await apply(vmManifest('keeper') + '---\n' + vmManifest('control'));
    const [kept, gone] = [await addressOf('keeper'), await addressOf('control')];
    const keptName = (await getVm('keeper')).status!.virtualMachineIPAddressName!;
    const goneName = (await getVm('control')).status!.virtualMachineIPAddressName!;
    await kubectl([
      'patch',
      'vmip',
      keptName,
      '-n',
      ns,
      '--type=merge',
      '-p',
      '{"metadata":{"ownerReferences":null}}',
    ]);
    await Promise.all([deleteVm('keeper'), deleteVm('control')]);
    // The garbage collector deletes the claim that still has its owner; the other stays, and so does its lease.
    await eventually(() => expect(getClaim(goneName)).rejects.toSatisfy(isNotFound));
    await eventually(async () => expect((await getLease(leaseOf(gone))).status?.phase).toBe('Released'));
    expect((await getClaim(keptName)).status).toMatchObject({ address: kept, phase: 'Bound' });
    expect((await getLease(leaseOf(kept))).status?.phase).toBe('Bound');
    // A new VM that names it gets the same address.
    await apply(vmManifest('heir', ns, `, virtualMachineIPAddressName: ${keptName}`));
    expect(await addressOf('heir')).toBe(kept);
  });

  it('gives racing claims distinct addresses while there are any, and says when the pool is full', async () => {
    // Addresses earlier tests released are held a while, then freed: wait for that, or one frees
    // under the full pool's check (run1 of stop 62: the late VM got it).
    await eventually(
      async () => {
        const leases = (
          await custom.listClusterCustomObject({ ...GROUP, plural: 'virtualmachineipaddressleases' })
        ).items as Lease[];
        expect(
          leases.filter((lease) => lease.status?.phase === 'Released').map((l) => l.metadata.name),
        ).toEqual([]);
      },
      HOLD_SECONDS * 1000 + 60_000,
    );
    // Two claims of one static address, made at once: one holds it, the other says who does.
    const taken = await leasedAddresses();
    const free = USABLE.find((address) => !taken.includes(address))!;
    await apply(claimManifest('twin-a', free) + '---\n' + claimManifest('twin-b', free));
    const twins = await eventually(async () => {
      const both = await Promise.all([getClaim('twin-a'), getClaim('twin-b')]);
      for (const claim of both) expect(bound(claim)?.status).toBeDefined();
      return both;
    });
    const holder = twins.find((c) => bound(c)?.status === 'True')!;
    const loser = twins.find((c) => c !== holder)!;
    expect(holder.status?.address).toBe(free);
    expect(bound(loser)).toMatchObject({
      reason: 'AddressInUse',
      message: `${free} is held by VirtualMachineIPAddress ${holder.metadata.name}`,
    });
    const racers = Array.from({ length: USABLE.length }, (_, i) => `racer-${i}`);
    await apply(racers.map((name) => claimManifest(name)).join('---\n'));
    const settled = await eventually(async () => {
      const claims = await Promise.all(racers.map((name) => getClaim(name)));
      for (const claim of claims) expect(bound(claim)?.status).toBeDefined();
      return claims;
    });
    const leased = settled.filter((c) => bound(c)?.status === 'True').map((c) => c.status!.address!);
    expect(new Set(leased).size).toBe(leased.length);
    await eventually(async () =>
      expect((await leasedAddresses()).filter((a) => USABLE.includes(a)).sort()).toEqual(USABLE),
    );
    const waiting = settled.filter((c) => bound(c)?.status === 'False');
    expect(waiting.length).toBeGreaterThan(0);
    for (const claim of waiting)
      expect(bound(claim)).toMatchObject({
        reason: 'PoolExhausted',
        message: `no free address in ${SUBNET}: all ${USABLE.length} are leased`,
      });
    // A VM whose address cannot be leased waits and says so.
    await apply(vmManifest('late').replace('state: Stopped', 'state: Running'));
    await eventually(async () => {
      const vm = await getVm('late');
      expect(vm.status?.phase).toBe('Pending');
      expect(ipCondition(vm)?.message).toContain(`no free address in ${SUBNET}`);
    });
  });
});
