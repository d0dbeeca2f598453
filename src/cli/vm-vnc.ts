// `vmop vm vnc NAME`: a VM's VNC display on a local port. The display listens on its runner pod's
// loopback only; this forwards to it through the apiserver (the user's own pods/portforward right)
// and sets a one-time password (the right to patch the VM's display Secret), written into a
// virt-viewer .vv file that remote-viewer reads and deletes. The password is never printed.
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import type { CoreV1Api, CustomObjectsApi, KubeConfig } from '@kubernetes/client-node';
import { VirtualMachine } from '../api/virtual-machine.js';
import { connectionFile } from '../console/connection-file.js';
import { displaySecretOf, setOneTimePassword } from '../console/one-time-password.js';
import { runnerPodOf } from '../console/runner-pod.js';
import { listenForwarding } from '../kube/port-forward.js';
import { vmApiRef } from '../reconcilers/virtual-machine/naming.js';
import { findExecutable } from '../runner/executable.js';
import { formatDuration } from '../util/table.js';
import { fail } from './failure.js';

export interface VncOptions {
  /** The local port; 0 takes a free one. */
  port: number;
  file?: string;
  open?: boolean;
  /** How long the password works once set (ms). */
  validity: number;
  /** How long to wait for the runner to set it (ms). */
  timeout: number;
}

export async function vncConsole(
  clients: { kubeConfig: KubeConfig; api: CustomObjectsApi; core: CoreV1Api; namespace: string },
  name: string,
  options: VncOptions,
): Promise<void> {
  const { kubeConfig, api, core, namespace } = clients;
  const readVm = async () =>
    VirtualMachine.parse(await api.getNamespacedCustomObject(vmApiRef(namespace, name)));
  const vm = await readVm();
  const vnc = vm.spec.vm.display.vnc;
  if (!vnc) fail(`vmop vm: VM ${name} has no VNC display (spec.vm.display.vnc)`);
  if (vm.status?.phase !== 'Running')
    fail(`vmop vm: VM ${name} is ${vm.status?.phase ?? 'not running'}, not Running`);
  const secret = await displaySecretOf(core, namespace, name);
  if (!secret) fail(`vmop vm: VM ${name} has no display Secret yet (vmop makes one as it starts): try again`);
  const password = await setOneTimePassword(
    {
      core,
      customObjects: api,
      namespace,
      vm,
      validitySeconds: options.validity / 1000,
      timeoutMs: options.timeout,
    },
    secret,
  );
  const { port } = await listenForwarding(kubeConfig, {
    namespace,
    // Asked per connection: a live migration moves the display to another pod.
    pod: async () => runnerPodOf(await readVm()),
    port: vnc.port,
    localPort: options.port,
    onError: (err) => console.error(`a connection could not be forwarded: ${err.message}`),
  });
  const file = options.file ?? `${name}-vnc.vv`;
  const endpoint = { host: '127.0.0.1', port };
  await writeFile(file, connectionFile(endpoint, `${namespace}/${name}`, password, 'vnc'), { mode: 0o600 });
  console.log(
    `Forwarding from 127.0.0.1:${port} to the VNC display of ${namespace}/${name} until Ctrl-C; ` +
      `${file} written (its password works for ${formatDuration(options.validity)})`,
  );
  if (options.open) {
    const viewer = findExecutable(['remote-viewer'], process.env.PATH);
    if (!viewer) fail('vmop vm: remote-viewer (virt-viewer) is not installed');
    spawn(viewer, [file], { stdio: 'ignore', detached: true }).unref();
  }
  await new Promise<never>(() => undefined); // until Ctrl-C
}
