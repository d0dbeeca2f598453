// A user network's guest ports (pure builders): they reach the runner config, whose template
// forwards them from the pod, and the pod may bind those below 1024.
import { describe, expect, it } from 'vitest';
import { VirtualMachineSpec } from '../../../src/api/virtual-machine.js';
import { desiredRunnerConfig } from '../../../src/reconcilers/virtual-machine/runner-config/config.js';
import { guestPortErrors } from '../../../src/reconcilers/virtual-machine/runner-pod/guest-ports.js';
import { testRunnerPod, testVm } from './vm-steps/vm-state-fixture.js';

const podOf = testRunnerPod;
const sysctlsOf = (vm: ReturnType<typeof testVm>, address?: string) =>
  podOf(vm, address).spec!.securityContext!.sysctls;

describe("a user network's guest ports", () => {
  it('reach the runner config, TCP unless said otherwise', () => {
    const vm = testVm({ networks: [{ user: { ports: [{ port: 22 }, { port: 53, protocol: 'UDP' }] } }] });
    expect(desiredRunnerConfig(vm, { hasDisplaySecret: false })['/Runner'].vm.network).toEqual([
      expect.objectContaining({
        type: 'user',
        ports: [
          { port: 22, protocol: 'TCP' },
          { port: 53, protocol: 'UDP' },
        ],
      }),
    ]);
  });

  it("reach the routed network that carries the VM's own address too (the runner relays them), still absent when none", () => {
    const network = (networks: unknown[]) =>
      desiredRunnerConfig(testVm({ networks }), { hasDisplaySecret: false, ipAddress: '10.66.10.5' })[
        '/Runner'
      ].vm.network;
    expect(network([{ user: { ports: [{ port: 7 }] } }])).toEqual([
      expect.objectContaining({
        type: 'routed',
        address: '10.66.10.5',
        ports: [{ port: 7, protocol: 'TCP' }],
      }),
    ]);
    expect(network([{ user: {} }])).toEqual([expect.not.objectContaining({ ports: expect.anything() })]);
  });

  it('open the lowest forwarded port below 1024 to the runner, and no more', () => {
    const sysctl = (value: string) => [{ name: 'net.ipv4.ip_unprivileged_port_start', value }];
    expect(sysctlsOf(testVm({ networks: [{ user: { ports: [{ port: 443 }, { port: 22 }] } }] }))).toEqual(
      sysctl('22'),
    );
    expect(sysctlsOf(testVm({ networks: [{ user: { ports: [{ port: 8080 }] } }] }))).toBeUndefined();
    expect(sysctlsOf(testVm({ networks: [{ user: {} }] }))).toBeUndefined();
    // A routed NIC's DHCP port (67) is opened as before; a lower guest port goes below it.
    expect(sysctlsOf(testVm({ networks: [{ user: {} }] }), '10.66.10.5')).toEqual(sysctl('67'));
    expect(
      sysctlsOf(testVm({ networks: [{ user: {} }, { user: { ports: [{ port: 7 }] } }] }), '10.66.10.5'),
    ).toEqual(sysctl('7'));
  });

  it("may not be the runner pod's own ports (its metrics, the SPICE and VNC displays): SpecValid says which and where", () => {
    const vm = testVm({
      networks: [
        { user: {} },
        { user: { ports: [{ port: 22 }, { port: 9110 }, { port: 5900 }, { port: 5900, protocol: 'UDP' }] } },
      ],
    });
    expect(guestPortErrors(vm)).toEqual([
      "spec.vm.networks[1].user.ports: TCP 9110 is the runner pod's port for the runner's metrics: forward another",
      "spec.vm.networks[1].user.ports: TCP 5900 is the runner pod's port for the SPICE display (spec.vm.display.spice.port): forward another",
    ]);
    expect(
      guestPortErrors(testVm({ networks: [{ user: { ports: [{ port: 22 }, { port: 5901 }] } }] })),
    ).toEqual([]);
    const withVnc = testVm({ networks: [{ user: { ports: [{ port: 5901 }] } }] });
    withVnc.spec.vm.display.vnc = { port: 5901 };
    expect(guestPortErrors(withVnc)).toEqual([
      "spec.vm.networks[0].user.ports: TCP 5901 is the runner pod's port for the VNC display (spec.vm.display.vnc.port): forward another",
    ]);
  });

  it('are ports: the schema refuses 0 and 65536', () => {
    for (const port of [0, 65536]) {
      const spec = { vm: { networks: [{ user: { ports: [{ port }] } }] } };
      expect(VirtualMachineSpec.safeParse(spec).success).toBe(false);
    }
  });
});
