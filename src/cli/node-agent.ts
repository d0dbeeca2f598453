// `vmop node-agent`: the one privileged part of vmop, one per node (the chart's DaemonSet). It
// gives runner pods /dev/kvm and /dev/net/tun as extended resources (a device plugin each), so they
// run unprivileged (KubeVirt's virt-handler does the same for its launchers), and, given its node's
// name, routes the VMs' own addresses: a tap in each runner pod that has one, and a route on this
// node to wherever each VM runs (as Deckhouse's vm-route-forge).
import path from 'node:path';
import type { Command } from 'commander';
import { z } from 'zod';
import { DEVICE_PLUGIN_DIR, KVM_DEVICE } from '../api/node-devices.js';
import { TUN_DEVICE } from '../api/vm-network.js';
import { loadKubeConfig } from '../kube/config.js';
import { runDevicePlugin } from '../node-agent/device-plugin.js';
import { runVmRouteController } from '../node-agent/vm-routes/controller.js';
import { createLogger } from '../util/logger.js';
import { flagErrors } from './flag-errors.js';
import { repeatable } from './repeatable.js';

const NodeAgentOptions = z.object({
  deviceDir: z.string().min(1),
  kvmDevice: z.string().min(1),
  kvmPods: z.coerce.number().int().min(1).max(10_000),
  hostDev: z.string().min(1),
  kvm: z.boolean(),
  nodeName: z.string().min(1).optional(),
  kubeconfig: z.string().min(1).optional(),
  vmCidr: z.array(z.cidrv4()),
});

export function register(program: Command) {
  program
    .command('node-agent')
    .description("Run on each node: give runner pods /dev/kvm and /dev/net/tun, route the VMs' own addresses")
    .option('--device-dir <dir>', "kubelet's device-plugins directory", DEVICE_PLUGIN_DIR)
    .option('--kvm-device <path>', 'the KVM device node', '/dev/kvm')
    .option('--no-kvm', 'do not offer /dev/kvm (nodes without KVM: QEMU emulates)')
    .option(
      '--kvm-pods <n>',
      "how many pods of the node may have /dev/kvm (and /dev/net/tun) at once: what it can run (kubelet's default maxPods)",
      '110',
    )
    .option(
      '--host-dev <dir>',
      "where this process sees the host's /dev (a DaemonSet mounts it elsewhere)",
      '/dev',
    )
    .option(
      '--node-name <name>',
      "this node: route the VMs' own addresses (needs --kubeconfig or the pod's credentials)",
      process.env.VMOP_NODE_NAME,
    )
    .option('--kubeconfig <path>', 'kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)')
    .addOption(
      repeatable(
        '--vm-cidr <subnet>',
        "a VM subnet (the managers' --vm-cidr): pods' traffic to it is not masqueraded",
      ),
    )
    .action(async (flags) => {
      const logger = createLogger('node-agent');
      const parsed = NodeAgentOptions.safeParse(flags);
      if (!parsed.success) {
        for (const message of flagErrors(parsed.error)) logger.error(message);
        process.exit(2);
      }
      const { deviceDir, kvmDevice, kvmPods, hostDev, kvm, nodeName, kubeconfig, vmCidr } = parsed.data;
      const seenAt = (device: string) => path.join(hostDev, path.relative('/dev', device));
      const devices = [
        ...(kvm ? [{ resource: KVM_DEVICE, path: kvmDevice }] : []),
        { resource: TUN_DEVICE, path: '/dev/net/tun' },
      ];
      const plugins = await Promise.all(
        devices.map((device) =>
          runDevicePlugin({
            dir: deviceDir,
            device: { ...device, seenAt: seenAt(device.path), count: kvmPods },
            logger,
          }),
        ),
      );
      const routes = nodeName
        ? await runVmRouteController({
            kubeConfig: loadKubeConfig(kubeconfig),
            node: nodeName,
            vmCidrs: vmCidr,
            logger,
          })
        : undefined;
      const stop = () =>
        void Promise.all([...plugins.map((plugin) => plugin.stop()), routes?.stop()]).then(() =>
          process.exit(0),
        );
      process.once('SIGTERM', stop);
      process.once('SIGINT', stop);
    });
}
