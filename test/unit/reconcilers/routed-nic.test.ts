// A VM's own address reaches its runner (pure builders): its first `user` NIC becomes the routed
// one in the runner config, its pod carries the NIC for the node agent, asks for /dev/net/tun and
// may bind DHCP's port, and a migration's target pod carries the same NIC.
import { describe, expect, it } from 'vitest';
import { ROUTED_NIC_ANNOTATION, TUN_DEVICE, routedNicMac, routedNicOf } from '../../../src/api/vm-network.js';
import { routedNicOfVm } from '../../../src/reconcilers/virtual-machine/address/routed-nic.js';
import { targetPod } from '../../../src/reconcilers/virtual-machine/migration/target.js';
import { desiredRunnerConfig } from '../../../src/reconcilers/virtual-machine/runner-config/config.js';
import { testRunnerPod, testVm } from './vm-steps/vm-state-fixture.js';

const ADDRESS = '10.66.10.5';
const vmWithNics = () => testVm({ networks: [{ tap: { bridge: 'br0' } }, { user: {} }, { user: {} }] }, {});
const podOf = testRunnerPod;

describe("a VM's own address in its runner config and pod", () => {
  it("is carried by the first user NIC, with a MAC fixed by the VM's uid", () => {
    const vm = testVm({ networks: [{ user: {} }, { user: {} }] });
    const network = desiredRunnerConfig(vm, { hasDisplaySecret: false, ipAddress: ADDRESS })['/Runner'].vm
      .network;
    expect(network).toEqual([
      { type: 'routed', device: 'virtio-net', mac: routedNicMac('vm-uid'), address: ADDRESS },
      { type: 'user', device: 'virtio-net' },
    ]);
    // Without an address (or before it is attached), QEMU's NAT as before.
    expect(desiredRunnerConfig(vm, { hasDisplaySecret: false })['/Runner'].vm.network?.[0]).toMatchObject({
      type: 'user',
    });
  });

  it('gives the pod its NIC for the node agent, /dev/net/tun and the DHCP port', () => {
    const vm = testVm({ networks: [{ user: {} }] });
    const pod = podOf(vm, ADDRESS);
    expect(routedNicOf(pod.metadata!.annotations)).toEqual({ address: ADDRESS, mac: routedNicMac('vm-uid') });
    expect(pod.spec!.containers[0]!.resources!.limits![TUN_DEVICE]).toBe('1');
    expect(pod.spec!.securityContext!.sysctls).toEqual([
      { name: 'net.ipv4.ip_unprivileged_port_start', value: '67' },
    ]);
    expect(pod.spec!.securityContext!.runAsNonRoot).toBe(true);
    const plain = podOf(vm);
    expect(plain.metadata!.annotations![ROUTED_NIC_ANNOTATION]).toBeUndefined();
    expect(plain.spec!.containers[0]!.resources!.limits?.[TUN_DEVICE]).toBeUndefined();
    expect(plain.spec!.securityContext!.sysctls).toBeUndefined();
  });

  it('is on no NIC of a VM without a user network, nor of a host-network pod', () => {
    expect(routedNicOfVm(testVm({ networks: [] }), ADDRESS)).toBeUndefined();
    expect(routedNicOfVm(vmWithNics(), ADDRESS)).toBeUndefined();
    const config = desiredRunnerConfig(vmWithNics(), { hasDisplaySecret: false, ipAddress: ADDRESS });
    expect(config['/Runner'].vm.network?.map((network) => network.type)).toEqual(['tap', 'user', 'user']);
    const hostNetwork = podOf(vmWithNics(), ADDRESS); // its tap network puts it on the host's
    expect(hostNetwork.metadata!.annotations![ROUTED_NIC_ANNOTATION]).toBeUndefined();
    expect(hostNetwork.spec!.containers[0]!.resources!.limits?.[TUN_DEVICE]).toBeUndefined();
  });

  it("goes with the guest to a migration's target pod", () => {
    const source = podOf(testVm({ networks: [{ user: {} }] }), ADDRESS);
    const target = targetPod(source, {
      name: 'vm-migration-x',
      id: 'x',
      sourceAddress: '10.244.1.5:5000',
      sourceNode: 'node-1',
      claimCopies: new Map(),
    });
    expect(routedNicOf(target.metadata!.annotations)).toEqual(routedNicOf(source.metadata!.annotations));
    expect(target.spec!.containers[0]!.resources!.limits![TUN_DEVICE]).toBe('1');
    expect(target.spec!.securityContext!.sysctls).toEqual(source.spec!.securityContext!.sysctls);
  });
});
