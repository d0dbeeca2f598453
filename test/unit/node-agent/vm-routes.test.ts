// The node agent's plan (pure): a tap in each runner pod of its node that has a routed NIC, and a
// route per running VM with an address of its own: to its pod on this node, else to the pod's node;
// during a migration to the pod the VM's status names (the source until the target took over).
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { ROUTED_NIC_ANNOTATION, routedNicMac, routedNicOf } from '../../../src/api/vm-network.js';
import { qemuRuns, tapPacketsFromGuest } from '../../../src/node-agent/vm-routes/linux.js';
import { planNodeNetwork, routeChanges, type VmView } from '../../../src/node-agent/vm-routes/plan.js';

const nic = (address: string) => ({ address, mac: routedNicMac(address) });
function pod(name: string, node: string, podIP: string, hostIP: string, address?: string): V1Pod {
  return {
    metadata: {
      name,
      namespace: 'ns',
      uid: `${name}-uid`,
      ownerReferences: [
        { apiVersion: 'vmoperator.jdrupes.org/v1', kind: 'VirtualMachine', name: 'a', uid: 'vm-a' },
      ],
      annotations: address ? { [ROUTED_NIC_ANNOTATION]: JSON.stringify(nic(address)) } : {},
    },
    spec: { nodeName: node, containers: [] },
    status: { phase: 'Running', podIP, hostIP },
  };
}
const vm = (name: string, address: string | undefined, runnerPod: string): VmView => ({
  metadata: { namespace: 'ns', name, uid: `vm-${name}` },
  status: {
    ...(address && { ipAddress: address, virtualMachineIPAddressName: `${name}-abcde` }),
    runnerPod: { name: runnerPod },
  },
});

describe("the node agent's routes and taps", () => {
  const source = pod('a', 'node-1', '10.244.1.5', '10.250.1.2', '10.66.10.5');
  const target = pod('a-migration-x', 'node-2', '10.244.2.7', '10.250.1.3', '10.66.10.5');

  it("routes a VM's address to its pod on this node and to its node elsewhere", () => {
    const vms = [vm('a', '10.66.10.5', 'a')];
    expect(planNodeNetwork('node-1', [source], vms).routes).toEqual(new Map([['10.66.10.5', '10.244.1.5']]));
    expect(planNodeNetwork('node-2', [source], vms).routes).toEqual(new Map([['10.66.10.5', '10.250.1.2']]));
  });

  it('makes taps in its own pods that have a routed NIC and an address, only', () => {
    const notYet = { ...pod('b', 'node-1', '', '10.250.1.2', '10.66.10.6'), status: { phase: 'Pending' } };
    const plain = pod('c', 'node-1', '10.244.1.9', '10.250.1.2');
    const plan = planNodeNetwork('node-1', [source, target, notYet, plain], []);
    expect(plan.taps).toEqual([{ uid: 'a-uid', namespace: 'ns', name: 'a', nic: nic('10.66.10.5') }]);
    // During a migration both pods have their tap; the target's node makes the target's.
    expect(planNodeNetwork('node-2', [source, target], []).taps.map((tap) => tap.name)).toEqual([
      'a-migration-x',
    ]);
  });

  it('switches routes only when the status names the target, never while the source is named', () => {
    const during = [vm('a', '10.66.10.5', 'a')];
    expect(planNodeNetwork('node-2', [source, target], during).routes.get('10.66.10.5')).toBe('10.250.1.2');
    const after = [vm('a', '10.66.10.5', 'a-migration-x')];
    expect(planNodeNetwork('node-2', [source, target], after).routes.get('10.66.10.5')).toBe('10.244.2.7');
    expect(planNodeNetwork('node-1', [source, target], after).routes.get('10.66.10.5')).toBe('10.250.1.3');
  });

  it("switches first on what the two nodes see themselves: the guest sending on the target's tap, the source's QEMU gone", () => {
    const during = [vm('a', '10.66.10.5', 'a')];
    // The target's node watches its target pod, the source's node its source pod.
    expect(planNodeNetwork('node-2', [source, target], during).moving).toEqual([
      expect.objectContaining({
        namedIsLocal: false,
        otherIsLocal: true,
        other: expect.objectContaining({ name: 'a-migration-x' }),
      }),
    ]);
    expect(planNodeNetwork('node-1', [source, target], during).moving).toEqual([
      expect.objectContaining({
        namedIsLocal: true,
        otherIsLocal: false,
        named: expect.objectContaining({ name: 'a' }),
      }),
    ]);
    const runsIn = { runsIn: new Set(['a-migration-x-uid']), leftFrom: new Set<string>() };
    expect(planNodeNetwork('node-2', [source, target], during, runsIn).routes.get('10.66.10.5')).toBe(
      '10.244.2.7',
    );
    const left = { runsIn: new Set<string>(), leftFrom: new Set(['a-uid']) };
    expect(planNodeNetwork('node-1', [source, target], during, left).routes.get('10.66.10.5')).toBe(
      '10.250.1.3',
    );
    // Once the status names the target, what was seen of the source changes nothing.
    const after = [vm('a', '10.66.10.5', 'a-migration-x')];
    const stale = { runsIn: new Set(['a-migration-x-uid']), leftFrom: new Set(['a-uid']) };
    expect(planNodeNetwork('node-1', [source, target], after, stale).routes.get('10.66.10.5')).toBe(
      '10.250.1.3',
    );
    expect(planNodeNetwork('node-2', [source, target], after, stale).routes.get('10.66.10.5')).toBe(
      '10.244.2.7',
    );
    // A VM with one pod is not moving; a pod that is not the VM's cannot pose as its target.
    expect(planNodeNetwork('node-1', [source], during).moving).toEqual([]);
    const impostor = { ...target, metadata: { ...target.metadata, ownerReferences: [] } };
    expect(planNodeNetwork('node-2', [source, impostor], during, runsIn).routes.get('10.66.10.5')).toBe(
      '10.250.1.2',
    );
  });

  it('routes nothing for a VM without its own address, a pod without its tap, or a pod that ended', () => {
    const agentsOnly = vm('a', undefined, 'a');
    agentsOnly.status!.ipAddress = '10.0.2.15'; // the guest agent's, not the VM's own
    expect(planNodeNetwork('node-1', [source], [agentsOnly]).routes.size).toBe(0);
    const oldPod = pod('a', 'node-1', '10.244.1.5', '10.250.1.2'); // QEMU's NAT, from before
    expect(planNodeNetwork('node-1', [oldPod], [vm('a', '10.66.10.5', 'a')]).routes.size).toBe(0);
    const ended = { ...source, status: { ...source.status, phase: 'Failed' } };
    expect(planNodeNetwork('node-1', [ended], [vm('a', '10.66.10.5', 'a')]).routes.size).toBe(0);
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
