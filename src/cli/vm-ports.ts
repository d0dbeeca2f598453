// `vmop vm port-forward` and `vmop vm expose`: a VM's guest ports (spec.vm.networks[].user.ports,
// which QEMU forwards from the same ports of the runner pod) reached as a pod's are: through the
// apiserver from this machine, or through a Service that selects the VM's runner pods.
import type { CoreV1Api, CustomObjectsApi, KubeConfig, V1Service } from '@kubernetes/client-node';
import { VirtualMachine } from '../api/virtual-machine.js';
import { runnerPodOf } from '../console/runner-pod.js';
import { listenForwarding } from '../kube/port-forward.js';
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
