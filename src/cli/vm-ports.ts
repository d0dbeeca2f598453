// `vmop vm port-forward`, `vmop vm ssh` and `vmop vm expose`: a VM's guest ports
// (spec.vm.networks[].user.ports, which QEMU forwards from the same ports of the runner pod) reached
// as a pod's are: through the apiserver from this machine, or through a Service that selects the
// VM's runner pods.
import {
  type CoreV1Api,
  type CustomObjectsApi,
  type KubeConfig,
  type V1Service,
} from '@kubernetes/client-node';
import { spawn } from 'node:child_process';
import { VirtualMachine } from '../api/virtual-machine.js';
import { runnerPodOf } from '../console/runner-pod.js';
import { listenForwarding, openForward } from '../kube/port-forward.js';
import { vmApiRef, vmLabels, LABEL_COMPONENT } from '../reconcilers/virtual-machine/naming.js';
import { RUNNER_COMPONENT } from '../reconcilers/virtual-machine/runner-pod/pod.js';
import { fail } from './failure.js';

/** `LOCAL:GUEST` or `GUEST` (the same port here). */
export function parsePortPair(value: string): { local: number; guest: number } {
  const match = /^(?:(\d+):)?(\d+)$/.exec(value);
  const port = (text: string | undefined) => (text === undefined ? undefined : Number(text));
  const guest = port(match?.[2]);
  const local = port(match?.[1]) ?? guest;
  const valid = (p: number | undefined): p is number => p !== undefined && p >= 0 && p <= 65535;
  if (!valid(local) || !valid(guest) || guest === 0)
    fail(`"${value}" is not LOCAL:GUEST or GUEST (ports; LOCAL 0 takes a free one)`);
  return { local, guest };
}

/** The guest's TCP ports that reach the runner pod (the VM's spec). */
export function forwardedGuestPorts(vm: VirtualMachine): number[] {
  return vm.spec.vm.networks.flatMap((network) =>
    (network.user?.ports ?? []).filter((p) => p.protocol === 'TCP').map((p) => p.port),
  );
}

function mustForward(vm: VirtualMachine, guest: number): void {
  const ports = forwardedGuestPorts(vm);
  if (!ports.includes(guest))
    fail(
      `${vm.metadata.name} does not forward its guest's TCP port ${guest} (it forwards ${ports.length ? ports.join(', ') : 'none'}): ` +
        `add {port: ${guest}} to a user network's ports in spec.vm.networks (taken at the next start)`,
    );
}

async function readVm(api: CustomObjectsApi, namespace: string, name: string): Promise<VirtualMachine> {
  return VirtualMachine.parse(await api.getNamespacedCustomObject(vmApiRef(namespace, name)));
}

/** Forwards a local port to the guest's port until the process is ended; the pod is looked up per connection. */
export async function portForwardToGuest(
  kubeConfig: KubeConfig,
  api: CustomObjectsApi,
  namespace: string,
  name: string,
  ports: { local: number; guest: number },
  localAddress: string,
): Promise<void> {
  mustForward(await readVm(api, namespace, name), ports.guest);
  const { port } = await listenForwarding(kubeConfig, {
    namespace,
    pod: async () => runnerPodOf(await readVm(api, namespace, name)),
    port: ports.guest,
    localPort: ports.local,
    localAddress,
    onError: (err) => console.error(`a connection could not be forwarded: ${err.message}`),
  });
  console.log(
    `Forwarding from ${localAddress}:${port} to the guest's port ${ports.guest} of ${namespace}/${name}`,
  );
  await new Promise<never>(() => undefined); // until Ctrl-C
}

/** This process's stdin and stdout to the guest's port (ssh's ProxyCommand), until either side ends. */
export async function pipeToGuest(
  kubeConfig: KubeConfig,
  api: CustomObjectsApi,
  namespace: string,
  name: string,
  guest: number,
): Promise<void> {
  const vm = await readVm(api, namespace, name);
  mustForward(vm, guest);
  const target = { namespace, pod: runnerPodOf(vm), port: guest };
  const socket = await openForward(kubeConfig, target, process.stdout, process.stdin, process.stderr);
  await new Promise<void>((resolve) => {
    if (!socket) return resolve();
    socket.on('close', () => resolve());
    process.stdin.on('end', () => socket.close());
  });
  process.stdin.destroy(); // nothing more to read: the process may end
}

export interface SshOptions {
  identity?: string;
  port: number;
  option: string[];
  kubeconfig?: string;
}

/** A word for a POSIX shell (ssh runs its ProxyCommand with the user's shell). */
const shellWord = (word: string) => `'${word.replaceAll("'", `'"'"'`)}'`;

/**
 * ssh's arguments for `vmop vm ssh`: its ProxyCommand is this vmop's `vm port-forward --stdio`, so
 * the connection goes through the apiserver; the VM's host key is kept under a name of its own.
 */
export function sshArguments(
  target: { user?: string; name: string; namespace: string },
  command: string[],
  options: SshOptions,
  // This vmop as it was started: from the TypeScript sources that takes node's loader flags too.
  vmop: string[] = [process.execPath, ...process.execArgv, process.argv[1]!],
): string[] {
  const proxy = [
    ...vmop,
    ...['vm', 'port-forward', '--stdio', target.name, String(options.port), '-n', target.namespace],
    ...(options.kubeconfig ? ['--kubeconfig', options.kubeconfig] : []),
  ];
  return [
    ...['-o', `ProxyCommand=${proxy.map(shellWord).join(' ')}`],
    ...['-o', `HostKeyAlias=${target.name}.${target.namespace}.vmop`],
    ...(options.identity ? ['-i', options.identity] : []),
    ...options.option.flatMap((option) => ['-o', option]),
    ...(target.user ? ['-l', target.user] : []),
    target.name,
    ...(command.length ? ['--', ...command] : []),
  ];
}

/** Runs ssh to the guest; resolves with ssh's exit code. */
export async function sshToGuest(
  api: CustomObjectsApi,
  namespace: string,
  destination: string,
  command: string[],
  options: SshOptions,
): Promise<number> {
  const at = destination.lastIndexOf('@');
  const name = destination.slice(at + 1);
  mustForward(await readVm(api, namespace, name), options.port);
  const args = sshArguments(
    { user: at > 0 ? destination.slice(0, at) : undefined, name, namespace },
    command,
    options,
  );
  const ssh = spawn('ssh', args, { stdio: 'inherit' });
  return new Promise((resolve, reject) => {
    ssh.on('error', (err) =>
      reject(new Error(`could not run ssh (${err.message}): install an OpenSSH client`)),
    );
    ssh.on('exit', (code) => resolve(code ?? 255));
  });
}

export interface ExposeOptions {
  port: number;
  targetPort?: number;
  type: string;
  name?: string;
}

/** The Service of `vmop vm expose`: the VM's runner pods (a migration's target too), on the guest's port. */
export function exposingService(vm: VirtualMachine, options: ExposeOptions): V1Service {
  const name = vm.metadata.name;
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: options.name ?? name, namespace: vm.metadata.namespace },
    spec: {
      type: options.type,
      selector: { ...vmLabels(name), [LABEL_COMPONENT]: RUNNER_COMPONENT },
      ports: [
        {
          name: 'guest',
          protocol: 'TCP',
          port: options.port,
          targetPort: options.targetPort ?? options.port,
        },
      ],
    },
  };
}

export async function exposeVm(
  api: CustomObjectsApi,
  core: CoreV1Api,
  namespace: string,
  name: string,
  options: ExposeOptions,
): Promise<void> {
  const vm = await readVm(api, namespace, name);
  const service = exposingService(vm, options);
  mustForward(vm, Number(service.spec!.ports![0]!.targetPort));
  const created = await core.createNamespacedService({ namespace, body: service });
  const { clusterIP, ports } = created.spec ?? {};
  console.log(
    `service/${created.metadata?.name} created: ${clusterIP}:${ports?.[0]?.port} reaches the guest's port ${ports?.[0]?.targetPort}`,
  );
}
