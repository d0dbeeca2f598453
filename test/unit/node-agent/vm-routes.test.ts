// The node agent's plan (pure): a tap in each runner pod of its node that has a routed NIC, and a
// route per running VM with an address of its own: to its pod on this node, else to the pod's node;
// during a migration to the pod the VM's status names (the source until the target took over).
import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { ROUTED_NIC_ANNOTATION, routedNicMac, routedNicOf } from '../../../src/api/vm-network.js';
import { planNodeNetwork, routeChanges, type VmView } from '../../../src/node-agent/vm-routes/plan.js';

const nic = (address: string) => ({ address, mac: routedNicMac(address) });
function pod(name: string, node: string, podIP: string, hostIP: string, address?: string): V1Pod {
  return {
    metadata: {
      name,
      namespace: 'ns',
      uid: `${name}-uid`,
      annotations: address ? { [ROUTED_NIC_ANNOTATION]: JSON.stringify(nic(address)) } : {},
    },
    spec: { nodeName: node, containers: [] },
    status: { phase: 'Running', podIP, hostIP },
  };
}
const vm = (name: string, address: string | undefined, runnerPod: string): VmView => ({
  metadata: { namespace: 'ns', name },
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
