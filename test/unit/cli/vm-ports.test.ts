// `vmop vm port-forward` and `vmop vm expose` (pure parts): the ports asked for, the guest ports a
// VM forwards, and the Service that follows the VM's runner pods.
import { describe, expect, it } from 'vitest';
import {
  exposingService,
  forwardedGuestPorts,
  parsePortPair,
  sshArguments,
} from '../../../src/cli/vm-ports.js';
import { CliFailure } from '../../../src/cli/failure.js';
import { runnerPodLabels } from '../../../src/reconcilers/virtual-machine/runner-pod/pod.js';
import { testVm } from '../reconcilers/vm-steps/vm-state-fixture.js';

describe('guest ports on the command line', () => {
  it('reads LOCAL:GUEST and GUEST, and refuses what is not a port', () => {
    expect(parsePortPair('8022:22')).toEqual({ local: 8022, guest: 22 });
    expect(parsePortPair('7')).toEqual({ local: 7, guest: 7 });
    expect(parsePortPair('0:22')).toEqual({ local: 0, guest: 22 });
    for (const bad of ['', 'ssh', '22:', '1:70000', '0', '-1:22'])
      expect(() => parsePortPair(bad), bad).toThrow(CliFailure);
  });

  it("knows the VM's forwarded TCP ports, of every user network", () => {
    const vm = testVm({
      networks: [
        { user: { ports: [{ port: 22 }, { port: 53, protocol: 'UDP' }] } },
        { user: { ports: [{ port: 80, protocol: 'TCP' }] } },
        { user: {} },
      ],
    });
    expect(forwardedGuestPorts(vm)).toEqual([22, 80]);
  });

  it("exposes the guest's port with a Service whose selector matches the VM's runner pods only", () => {
    const vm = testVm({ networks: [{ user: { ports: [{ port: 7 }] } }] });
    const service = exposingService(vm, { port: 7007, targetPort: 7, type: 'ClusterIP' });
    expect(service.spec!.ports).toEqual([{ name: 'guest', protocol: 'TCP', port: 7007, targetPort: 7 }]);
    const selector = service.spec!.selector!;
    const podLabels = runnerPodLabels(vm);
    expect(Object.entries(selector).every(([key, value]) => podLabels[key] === value)).toBe(true);
    const other = runnerPodLabels({ ...vm, metadata: { ...vm.metadata, name: 'other' } });
    expect(Object.entries(selector).every(([key, value]) => other[key] === value)).toBe(false);
  });
});

describe('`vmop vm ssh`', () => {
  it("runs ssh through this vmop's port-forward, with the VM's own host key name", () => {
    const args = sshArguments(
      { user: 'root', name: 'web', namespace: "team's" },
      ['uname', '-a'],
      { port: 22, option: ['StrictHostKeyChecking=no'], identity: '/k/id', kubeconfig: '/k/config' },
      ['/usr/bin/node', '/opt/vmop/main.js'],
    );
    expect(args).toEqual([
      '-o',
      `ProxyCommand='/usr/bin/node' '/opt/vmop/main.js' 'vm' 'port-forward' '--stdio' 'web' '22' '-n' 'team'"'"'s' '--kubeconfig' '/k/config'`,
      ...['-o', "HostKeyAlias=web.team's.vmop"],
      ...['-i', '/k/id', '-o', 'StrictHostKeyChecking=no', '-l', 'root', 'web', '--', 'uname', '-a'],
    ]);
  });
});
