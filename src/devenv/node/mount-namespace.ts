// kubelet's device-plugin directory is fixed at /var/lib/kubelet/device-plugins (its --root-dir
// does not move it: kubernetes/kubernetes#120626), and this machine runs several nodes at once.
// So each node's processes share a mount namespace of their own, in which that directory is the
// node's; containerd runs there too, so that it sees the volumes kubelet mounts, as on a real node.
// The namespace is kept by binding it to a file below the node's directory, so a service started
// again joins the same one; the node's clean-up unmounts it, and its mounts go with it.
import { execFile } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { DEVICE_PLUGIN_DIR } from '../../api/node-devices.js';

const run = promisify(execFile);

/** Makes the node's mount namespace; returns the file that holds it (for `nsenter --mount=`). */
export async function makeNodeMountNamespace(dir: string): Promise<string> {
  const nsDir = path.join(dir, 'ns');
  const nsFile = path.join(nsDir, 'mnt');
  const ownDevicePlugins = path.join(dir, 'device-plugins');
  for (const made of [nsDir, ownDevicePlugins, DEVICE_PLUGIN_DIR]) await mkdir(made, { recursive: true });
  await writeFile(nsFile, '');
  // A namespace may be bound to a file only where mounts do not propagate.
  await run('mount', ['--bind', nsDir, nsDir]);
  await run('mount', ['--make-private', nsDir]);
  await run('unshare', [
    `--mount=${nsFile}`,
    ...['--propagation', 'private'],
    ...['mount', '--bind', ownDevicePlugins, DEVICE_PLUGIN_DIR],
  ]);
  return nsFile;
}
