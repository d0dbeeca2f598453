// `vmop node-agent`: the one privileged part of vmop, one per node (the chart's DaemonSet). It
// gives runner pods /dev/kvm as the extended resource devices.vmop.jdrupes.org/kvm (a device
// plugin), so they run unprivileged (KubeVirt's virt-handler does the same for its launchers).
import path from 'node:path';
import type { Command } from 'commander';
import { z } from 'zod';
import { DEVICE_PLUGIN_DIR, KVM_DEVICE } from '../api/node-devices.js';
import { runDevicePlugin } from '../node-agent/device-plugin.js';
import { createLogger } from '../util/logger.js';
import { flagErrors } from './flag-errors.js';

const NodeAgentOptions = z.object({
  deviceDir: z.string().min(1),
  kvmDevice: z.string().min(1),
  kvmPods: z.coerce.number().int().min(1).max(10_000),
  hostDev: z.string().min(1),
});

export function register(program: Command) {
  program
    .command('node-agent')
    .description("Run on each node: give runner pods /dev/kvm through kubelet's device plugin API")
    .option('--device-dir <dir>', "kubelet's device-plugins directory", DEVICE_PLUGIN_DIR)
    .option('--kvm-device <path>', 'the KVM device node', '/dev/kvm')
    .option('--kvm-pods <n>', 'how many pods of the node may have /dev/kvm at once', '1000')
    .option(
      '--host-dev <dir>',
      "where this process sees the host's /dev (a DaemonSet mounts it elsewhere)",
      '/dev',
    )
    .action(async (flags) => {
      const logger = createLogger('node-agent');
      const parsed = NodeAgentOptions.safeParse(flags);
      if (!parsed.success) {
        for (const message of flagErrors(parsed.error)) logger.error(message);
        process.exit(2);
      }
      const { deviceDir, kvmDevice, kvmPods, hostDev } = parsed.data;
      const seenAt = path.join(hostDev, path.relative('/dev', kvmDevice));
      const plugin = await runDevicePlugin({
        dir: deviceDir,
        device: { resource: KVM_DEVICE, path: kvmDevice, seenAt, count: kvmPods },
        logger,
      });
      const stop = () => void plugin.stop().then(() => process.exit(0));
      process.once('SIGTERM', stop);
      process.once('SIGINT', stop);
    });
}
