// VM addresses, the pure parts: the subnets and what may be leased from them, the claim vmop makes
// for a VM, which VM a claim is attached to, and what a VM waits for.
import { describe, expect, it } from 'vitest';
import { VirtualMachineIPAddress } from '../../../src/api/virtual-machine-ip-address.js';
import {
  attachedVm,
  autoIpAddressName,
} from '../../../src/reconcilers/virtual-machine-ip-address/attachment.js';
import {
  addressProblem,
  parseSubnet,
  pickFreeAddress,
  usableAddresses,
  type Subnet,
} from '../../../src/reconcilers/virtual-machine-ip-address/subnets.js';
import { planIpAddress } from '../../../src/reconcilers/virtual-machine/address/ip-address.js';
import { testVm } from './vm-steps/vm-state-fixture.js';

const subnet = (cidr: string) => parseSubnet(cidr) as Subnet;

describe('VM subnets', () => {
  it('parses subnets and names what is wrong with one that is not', () => {
    expect(subnet('10.66.10.0/24')).toMatchObject({ cidr: '10.66.10.0/24' });
    expect(parseSubnet('10.66.10.5/24')).toBe(
      "10.66.10.5/24 is not a subnet's first address: did you mean 10.66.10.0/24?",
    );
    expect(parseSubnet('10.66.10.0')).toBe('10.66.10.0 is not an IPv4 subnet (a.b.c.d/n)');
    expect(parseSubnet('10.66.300.0/24')).toBe('10.66.300.0/24 is not an IPv4 subnet (a.b.c.d/n)');
  });

  it("never gives out a subnet's network or broadcast address, nor one outside every subnet", () => {
    const subnets = [subnet('10.66.10.0/29'), subnet('10.66.20.0/24')];
    expect(usableAddresses(subnets)).toBe(6 + 254);
    expect(addressProblem('10.66.10.1', subnets)).toBeUndefined();
    expect(addressProblem('10.66.20.254', subnets)).toBeUndefined();
    expect(addressProblem('10.66.10.0', subnets)).toBe('10.66.10.0 is the network address of 10.66.10.0/29');
    expect(addressProblem('10.66.10.7', subnets)).toBe(
      '10.66.10.7 is the broadcast address of 10.66.10.0/29',
    );
    expect(addressProblem('10.66.10.8', subnets)).toBe(
      '10.66.10.8 is in none of the VM subnets (10.66.10.0/29, 10.66.20.0/24)',
    );
    expect(addressProblem('10.66.10.1', [])).toMatch(/^no VM subnets are configured/);
  });

  it('picks a free address from a random start, over all subnets, until none is left', () => {
    const subnets = [subnet('10.66.10.0/30'), subnet('10.66.20.0/30')];
    expect(pickFreeAddress(subnets, new Set(), () => 0)).toBe('10.66.10.1');
    expect(pickFreeAddress(subnets, new Set(), () => 0.99)).toBe('10.66.20.2');
    // From the last, past the taken ones, round to the first.
    expect(pickFreeAddress(subnets, new Set(['10.66.20.2']), () => 0.99)).toBe('10.66.10.1');
    const all = new Set(['10.66.10.1', '10.66.10.2', '10.66.20.1', '10.66.20.2']);
    expect(pickFreeAddress(subnets, all, () => 0.5)).toBeUndefined();
    const picked = new Set<string>();
    for (let i = 0; i < 4; i++) picked.add(pickFreeAddress(subnets, picked)!);
    expect(picked).toEqual(all);
  });
});

const claim = (status?: Record<string, unknown>) =>
  VirtualMachineIPAddress.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachineIPAddress',
    metadata: { name: 'web-ip', namespace: 'ns', uid: 'claim-uid' },
    spec: { type: 'Auto' },
    ...(status && { status }),
  });

describe("a VM's address", () => {
  it('is asked for with a claim of its own, owned by the VM, where VM subnets are configured', () => {
    const vm = testVm();
    expect(planIpAddress(vm, undefined, false)).toEqual({});
    const plan = planIpAddress(vm, undefined, true);
    const name = autoIpAddressName(vm.metadata.name, vm.metadata.uid!);
    expect(name).toMatch(new RegExp(`^${vm.metadata.name}-[0-9a-f]{5}$`));
    expect(plan).toMatchObject({
      name,
      waiting: {
        reason: 'WaitingForIPAddress',
        message: `waiting for VirtualMachineIPAddress ${name} to lease an address`,
      },
      create: {
        kind: 'VirtualMachineIPAddress',
        metadata: {
          name,
          namespace: vm.metadata.namespace,
          ownerReferences: [{ kind: 'VirtualMachine', uid: vm.metadata.uid }],
        },
        spec: { type: 'Auto' },
      },
    });
  });

  it('is the named claim once attached to the VM; until then the VM waits and says why', () => {
    const vm = testVm();
    vm.spec.vm.virtualMachineIPAddressName = 'web-ip';
    expect(planIpAddress(vm, undefined, false)).toEqual({
      name: 'web-ip',
      waiting: { reason: 'WaitingForIPAddress', message: 'VirtualMachineIPAddress web-ip does not exist' },
    });
    const attached = claim({
      address: '10.66.10.3',
      virtualMachineName: vm.metadata.name,
      phase: 'Attached',
    });
    expect(planIpAddress(vm, attached, true)).toEqual({ name: 'web-ip', address: '10.66.10.3' });
    const elsewhere = claim({ address: '10.66.10.3', virtualMachineName: 'other', phase: 'Attached' });
    expect(planIpAddress(vm, elsewhere, true).waiting?.message).toBe(
      'VirtualMachineIPAddress web-ip is attached to VM other',
    );
    const full = claim({
      phase: 'Pending',
      conditions: [
        {
          type: 'Bound',
          status: 'False',
          reason: 'PoolExhausted',
          message: 'no free address in 10.66.10.0/30: all 2 are leased',
          lastTransitionTime: '2026-11-28T00:00:00Z',
        },
      ],
    });
    expect(planIpAddress(vm, full, true).waiting?.message).toBe(
      'VirtualMachineIPAddress web-ip: no free address in 10.66.10.0/30: all 2 are leased',
    );
  });

  it('is attached to one VM of those that name it: the one it is, else the oldest', () => {
    const vm = (name: string, created: string, named = 'web-ip', deleted = false) => ({
      metadata: {
        name,
        uid: `${name}-uid`,
        creationTimestamp: created,
        ...(deleted && { deletionTimestamp: created }),
      },
      spec: { vm: { virtualMachineIPAddressName: named } },
    });
    const vms = [
      vm('b', '2026-11-28T10:00:00Z'),
      vm('a', '2026-11-28T11:00:00Z'),
      vm('c', '2026-11-28T09:00:00Z', 'other'),
    ];
    expect(attachedVm('web-ip', vms, undefined)).toBe('b');
    expect(attachedVm('web-ip', vms, 'a')).toBe('a');
    expect(attachedVm('web-ip', vms, 'c')).toBe('b');
    expect(attachedVm('web-ip', [vm('b', '2026-11-28T10:00:00Z', 'web-ip', true)], 'b')).toBeUndefined();
  });
});
