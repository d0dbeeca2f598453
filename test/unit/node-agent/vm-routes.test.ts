// The node agent's plan (pure): which VM holds which address comes from its lease and claim only;
// a tap in each pod of its node that a VM with an address owns, and a route per running VM with an
// address of its own: to its pod on this node, else to the pod's node; during a migration to the
// pod the VM's status names (the source until the target took over).
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { leaseName } from '../../../src/api/virtual-machine-ip-address.js';
import { ROUTED_NIC_ANNOTATION, routedNicMac, routedNicOf } from '../../../src/api/vm-network.js';
import {
  leasedAddresses,
  type ClaimView,
  type LeaseView,
} from '../../../src/node-agent/vm-routes/leased-addresses.js';
import { qemuRuns, tapPacketsFromGuest } from '../../../src/node-agent/vm-routes/linux.js';
import {
  planNodeNetwork,
  routeChanges,
  type Handover,
  type VmView,
} from '../../../src/node-agent/vm-routes/plan.js';
import { parseSubnet, type Subnet } from '../../../src/reconcilers/virtual-machine-ip-address/subnets.js';

const nic = (address: string, vmUid = 'vm-a') => ({ address, mac: routedNicMac(vmUid) });
function pod(
  name: string,
  node: string,
  podIP: string,
  hostIP: string,
  address?: string,
  owner = { vm: 'a', namespace: 'ns' },
): V1Pod {
  return {
    metadata: {
      name,
      namespace: owner.namespace,
      uid: `${name}-uid`,
      ownerReferences: [
        {
          apiVersion: 'vmoperator.jdrupes.org/v1',
          kind: 'VirtualMachine',
          name: owner.vm,
          uid: `vm-${owner.vm}`,
          controller: true,
        },
      ],
      annotations: address ? { [ROUTED_NIC_ANNOTATION]: JSON.stringify(nic(address, `vm-${owner.vm}`)) } : {},
    },
    spec: { nodeName: node, containers: [] },
    status: { phase: 'Running', podIP, hostIP },
  };
}
const vm = (name: string, runnerPod: string, namespace = 'ns'): VmView => ({
  metadata: { namespace, name, uid: `vm-${name}` },
  status: { runnerPod: { name: runnerPod } },
});
/** VM a in ns holds 10.66.10.5 (its lease and claim say so). */
const held = new Map([['ns/a', '10.66.10.5']]);
const plan = (node: string, pods: V1Pod[], vms: VmView[], handover?: Handover) =>
  planNodeNetwork(node, pods, vms, held, handover);

describe("the node agent's routes and taps", () => {
  const source = pod('a', 'node-1', '10.244.1.5', '10.250.1.2', '10.66.10.5');
  const target = pod('a-migration-x', 'node-2', '10.244.2.7', '10.250.1.3', '10.66.10.5');

  it("routes a VM's address to its pod on this node and to its node elsewhere", () => {
    const vms = [vm('a', 'a')];
    expect(plan('node-1', [source], vms).routes).toEqual(new Map([['10.66.10.5', '10.244.1.5']]));
    expect(plan('node-2', [source], vms).routes).toEqual(new Map([['10.66.10.5', '10.250.1.2']]));
  });

  it("makes taps in its VMs' pods that carry the VM's address, only", () => {
    const notYet = {
      ...pod('a-next', 'node-1', '', '10.250.1.2', '10.66.10.5'),
      status: { phase: 'Pending' },
    };
    const plain = pod('c', 'node-1', '10.244.1.9', '10.250.1.2');
    const vms = [vm('a', 'a'), vm('c', 'c')];
    const local = plan('node-1', [source, target, notYet, plain], vms);
    expect(local.taps).toEqual([{ uid: 'a-uid', namespace: 'ns', name: 'a', nic: nic('10.66.10.5') }]);
    // During a migration both pods have their tap; the target's node makes the target's.
    expect(plan('node-2', [source, target], vms).taps.map((tap) => tap.name)).toEqual(['a-migration-x']);
  });

  it('switches routes only when the status names the target, never while the source is named', () => {
    const during = [vm('a', 'a')];
    expect(plan('node-2', [source, target], during).routes.get('10.66.10.5')).toBe('10.250.1.2');
    const after = [vm('a', 'a-migration-x')];
    expect(plan('node-2', [source, target], after).routes.get('10.66.10.5')).toBe('10.244.2.7');
    expect(plan('node-1', [source, target], after).routes.get('10.66.10.5')).toBe('10.250.1.3');
  });

  it("switches first on what the two nodes see themselves: the guest sending on the target's tap, the source's QEMU gone", () => {
    const during = [vm('a', 'a')];
    // The target's node watches its target pod, the source's node its source pod.
    expect(plan('node-2', [source, target], during).moving).toEqual([
      expect.objectContaining({
        namedIsLocal: false,
        otherIsLocal: true,
        other: expect.objectContaining({ name: 'a-migration-x' }),
      }),
    ]);
    expect(plan('node-1', [source, target], during).moving).toEqual([
      expect.objectContaining({
        namedIsLocal: true,
        otherIsLocal: false,
        named: expect.objectContaining({ name: 'a' }),
      }),
    ]);
    const runsIn = { runsIn: new Set(['a-migration-x-uid']), leftFrom: new Set<string>() };
    expect(plan('node-2', [source, target], during, runsIn).routes.get('10.66.10.5')).toBe('10.244.2.7');
    const left = { runsIn: new Set<string>(), leftFrom: new Set(['a-uid']) };
    expect(plan('node-1', [source, target], during, left).routes.get('10.66.10.5')).toBe('10.250.1.3');
    // Once the status names the target, what was seen of the source changes nothing.
    const after = [vm('a', 'a-migration-x')];
    const stale = { runsIn: new Set(['a-migration-x-uid']), leftFrom: new Set(['a-uid']) };
    expect(plan('node-1', [source, target], after, stale).routes.get('10.66.10.5')).toBe('10.250.1.3');
    expect(plan('node-2', [source, target], after, stale).routes.get('10.66.10.5')).toBe('10.244.2.7');
    // A VM with one pod is not moving; a pod that is not the VM's cannot pose as its target.
    expect(plan('node-1', [source], during).moving).toEqual([]);
    const impostor = { ...target, metadata: { ...target.metadata, ownerReferences: [] } };
    expect(plan('node-2', [source, impostor], during, runsIn).routes.get('10.66.10.5')).toBe('10.250.1.2');
  });

  it('routes nothing for a VM without its own address, a pod without its tap, or a pod that ended', () => {
    expect(planNodeNetwork('node-1', [source], [vm('a', 'a')], new Map()).routes.size).toBe(0);
    const oldPod = pod('a', 'node-1', '10.244.1.5', '10.250.1.2'); // QEMU's NAT, from before
    expect(plan('node-1', [oldPod], [vm('a', 'a')]).routes.size).toBe(0);
    const ended = { ...source, status: { ...source.status, phase: 'Failed' } };
    expect(plan('node-1', [ended], [vm('a', 'a')]).routes.size).toBe(0);
  });

  it("gives a tenant no tap and no route for another VM's address, whatever her pods and statuses say", () => {
    const victim = vm('a', 'a');
    // evil in team-b: her runner pod's annotation names the victim's address, her VM's status
    // names that pod; her VM holds no lease.
    const evilPod = pod('evil', 'node-1', '10.244.1.66', '10.250.1.2', '10.66.10.5', {
      vm: 'evil',
      namespace: 'team-b',
    });
    const evil = vm('evil', 'evil', 'team-b');
    const network = plan('node-1', [source, evilPod], [victim, evil]);
    expect(network.routes).toEqual(new Map([['10.66.10.5', '10.244.1.5']]));
    expect(network.taps.map((tap) => tap.name)).toEqual(['a']);
    // Her own pod, made to look like the victim's (its owner reference names the victim by name
    // and uid, in her namespace), is no pod of the victim's.
    const lookalike = pod('a-migration-y', 'node-1', '10.244.1.67', '10.250.1.2', '10.66.10.5', {
      vm: 'a',
      namespace: 'team-b',
    });
    const runsThere = { runsIn: new Set(['a-migration-y-uid']), leftFrom: new Set<string>() };
    const posed = plan('node-1', [source, lookalike], [victim], runsThere);
    expect(posed.routes.get('10.66.10.5')).toBe('10.244.1.5');
    expect(posed.taps.map((tap) => tap.name)).toEqual(['a']);
    // A pod that names the VM as an owner but not as its controller is no pod vmop made for it.
    const notControlled = pod('a-extra', 'node-1', '10.244.1.68', '10.250.1.2', '10.66.10.5');
    notControlled.metadata!.ownerReferences![0]!.controller = false;
    expect(plan('node-1', [source, notControlled], [victim]).taps.map((tap) => tap.name)).toEqual(['a']);
    // Her own VM with a lease of its own gets its own address routed, with its own MAC.
    const hers = planNodeNetwork('node-1', [evilPod], [evil], new Map([['team-b/evil', '10.66.10.5']]));
    expect(hers.taps).toEqual([
      { uid: 'evil-uid', namespace: 'team-b', name: 'evil', nic: nic('10.66.10.5', 'vm-evil') },
    ]);
  });

  it('replaces what differs and removes what is no longer planned', () => {
    const current = new Map([
      ['10.66.10.5', '10.244.1.5'],
      ['10.66.10.6', '10.250.1.3'],
      ['10.66.10.7', '10.250.1.3'],
    ]);
    const planned = new Map([
      ['10.66.10.5', '10.250.1.3'],
      ['10.66.10.6', '10.250.1.3'],
      ['10.66.10.8', '10.244.1.9'],
    ]);
    expect(routeChanges(current, planned)).toEqual({
      replace: [
        ['10.66.10.5', '10.250.1.3'],
        ['10.66.10.8', '10.244.1.9'],
      ],
      remove: ['10.66.10.7'],
    });
  });

  it("reads a pod's routed NIC only when it is valid; a VM's MAC is fixed by its uid", () => {
    expect(
      routedNicOf({ [ROUTED_NIC_ANNOTATION]: '{"address":"10.66.10.5","mac":"02:aa:bb:cc:dd:ee"}' }),
    ).toEqual({
      address: '10.66.10.5',
      mac: '02:aa:bb:cc:dd:ee',
    });
    expect(
      routedNicOf({ [ROUTED_NIC_ANNOTATION]: '{"address":"nope","mac":"02:aa:bb:cc:dd:ee"}' }),
    ).toBeUndefined();
    expect(routedNicOf({ [ROUTED_NIC_ANNOTATION]: 'not json' })).toBeUndefined();
    expect(routedNicMac('uid-1')).toMatch(/^02(:[0-9a-f]{2}){5}$/);
    expect(routedNicMac('uid-1')).toBe(routedNicMac('uid-1'));
    expect(routedNicMac('uid-2')).not.toBe(routedNicMac('uid-1'));
  });
});

describe('which VM holds an address: leases and claims, nothing else', () => {
  const subnets = [parseSubnet('10.66.10.0/24') as Subnet];
  const lease = (
    address: string,
    namespace: string,
    name: string,
    extra: Partial<LeaseView> = {},
  ): LeaseView => ({
    metadata: { name: leaseName(address) },
    spec: { virtualMachineIPAddressRef: { namespace, name, uid: `${name}-uid` } },
    status: { phase: 'Bound' },
    ...extra,
  });
  const claim = (namespace: string, name: string, address: string, vmName: string): ClaimView => ({
    metadata: { namespace, name, uid: `${name}-uid` },
    status: { address, virtualMachineName: vmName },
  });

  it("follows a bound lease to its claim and the claim's VM", () => {
    const leases = [
      lease('10.66.10.196', 'default', 'victim-ip'),
      lease('10.66.10.171', 'team-b', 'evil-ip'),
    ];
    const claims = [
      claim('default', 'victim-ip', '10.66.10.196', 'victim'),
      claim('team-b', 'evil-ip', '10.66.10.171', 'evil'),
    ];
    expect(leasedAddresses(leases, claims, subnets)).toEqual(
      new Map([
        ['default/victim', '10.66.10.196'],
        ['team-b/evil', '10.66.10.171'],
      ]),
    );
  });

  it("gives a tenant's claim no address whose lease names another claim, and nothing the lease does not hold", () => {
    const leases = [lease('10.66.10.196', 'default', 'victim-ip')];
    // Her claim's status (were she able to write it) names the victim's address.
    const forged = claim('team-b', 'victim-ip', '10.66.10.196', 'evil');
    expect(leasedAddresses(leases, [forged], subnets).size).toBe(0);
    // A claim made again under the same name (another uid), a released lease, a claim that says
    // another address, an address outside the VM subnets: none holds it.
    const again = {
      ...claim('default', 'victim-ip', '10.66.10.196', 'victim'),
      metadata: { namespace: 'default', name: 'victim-ip', uid: 'new' },
    };
    expect(leasedAddresses(leases, [again], subnets).size).toBe(0);
    const released = [lease('10.66.10.196', 'default', 'victim-ip', { status: { phase: 'Released' } })];
    expect(
      leasedAddresses(released, [claim('default', 'victim-ip', '10.66.10.196', 'victim')], subnets).size,
    ).toBe(0);
    expect(
      leasedAddresses(leases, [claim('default', 'victim-ip', '10.66.10.7', 'victim')], subnets).size,
    ).toBe(0);
    const outside = [lease('10.0.0.5', 'default', 'far-ip')];
    expect(leasedAddresses(outside, [claim('default', 'far-ip', '10.0.0.5', 'far')], subnets).size).toBe(0);
  });
});

describe("what the node agent reads of a pod's processes", () => {
  it("reads the guest's packets off the tap's row of /proc/<pid>/net/dev, and whether a QEMU still runs", async () => {
    // A copy of the kernel's formats (the real ones belong to pods this test has none of).
    const proc = await mkdtemp(path.join(os.tmpdir(), 'vmop-proc-'));
    try {
      await mkdir(path.join(proc, '41', 'net'), { recursive: true });
      await writeFile(
        path.join(proc, '41', 'net', 'dev'),
        `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
  eth0:   90123     512    0    0    0     0          0         0    81234     498    0    0    0     0       0          0
 vmop0:    4410      37    0    0    0     0          0         0     7788      52    0    3    0     0       0          0
`,
      );
      expect(await tapPacketsFromGuest(41, proc)).toBe(37);
      expect(await tapPacketsFromGuest(42, proc)).toBe(0); // gone
      await mkdir(path.join(proc, '77'));
      const stat = (state: string) => `77 (qemu-system-x86) ${state} 1 77 77 0 -1 4194560 1000 0 0 0`;
      await writeFile(path.join(proc, '77', 'stat'), stat('S'));
      expect(await qemuRuns(77, proc)).toBe(true);
      await writeFile(path.join(proc, '77', 'stat'), stat('Z'));
      expect(await qemuRuns(77, proc)).toBe(false);
      expect(await qemuRuns(78, proc)).toBe(false);
    } finally {
      await rm(proc, { recursive: true, force: true });
    }
  });
});
