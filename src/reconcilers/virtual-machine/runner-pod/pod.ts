// The runner pod of a VM (pure), as vmop makes it: one container running `vmop runner` with the
// VM's config, its claims, the display and provisioning Secrets, and the namespace's image
// repository. vmop makes and deletes these pods itself (VM-Operator has since 3.4), so a VM can have
// two of them for a live migration; a pod is never changed after it was made, but for its metadata.
// It is an unprivileged pod on the pod network (Pod Security "restricted"); only a VM with a
// host-bridge tap network, where an admin allows it, gets VM-Operator's privileged host-network pod.
import type { V1EnvVar, V1Pod, V1Volume, V1VolumeMount } from '@kubernetes/client-node';
import type { VirtualMachine } from '../../../api/virtual-machine.js';
import type { VirtualMachineOperation } from '../../../api/virtual-machine-operation.js';
import { parseMemorySize } from '../../../api/runner-config.js';
import {
  CLOUD_INIT_SECRET_DIR,
  CONFIG_DIR,
  DATA_DIR,
  DISPLAY_SECRET_DIR,
  IMAGE_REPOSITORY_CLAIM,
  IMAGE_REPOSITORY_DIR,
  LABEL_COMPONENT,
  POD_SPEC_ANNOTATION,
  RUNNER_CONTAINER,
  RUNNER_DATA_CLAIM,
  SYSPREP_SECRET_DIR,
  ownerReference,
  vmKey,
  vmLabels,
} from '../naming.js';
import { podSpecOfVm } from '../lifecycle/restart-awaiting.js';
import { resourceRequirements, type RunnerClaim } from '../disks/claims.js';
import { maximumCpus } from '../runner-config/config.js';
import { RUNNER_REDIS_URL_KEY, RUNNER_SECRET, RUNNER_SERVICE_ACCOUNT } from '../runner-config/identity.js';
import { CLASS_LABEL } from '../../../api/virtual-machine-class.js';
import { KVM_DEVICE } from '../../../api/node-devices.js';
import { ROUTED_NIC_ANNOTATION, TUN_DEVICE, type RoutedNic } from '../../../api/vm-network.js';
import { RESTRICTED_CONTAINER_SECURITY, RESTRICTED_POD_SECURITY } from '../pod-security.js';

/** Where a runner serves its VM's metrics (pods on the host network do not: VMs would share it). */
export const RUNNER_METRICS_PORT = 9110;
/**
 * Ready while the guest runs in this pod (the runner's /readyz): a Service selecting the VM's pods
 * reaches neither a QEMU that has not let the guest run yet, nor a migration's target before
 * the guest arrived, nor its source after the guest left.
 */
const GUEST_RUNS_HERE_PROBE = {
  httpGet: { path: '/readyz', port: RUNNER_METRICS_PORT },
  periodSeconds: 1,
  failureThreshold: 1,
};
/** The annotations by which a plain Prometheus finds a pod's metrics (the chart's PodMonitor goes by the port's name). */
export const SCRAPE_ANNOTATION_PREFIX = 'prometheus.io/';
const SCRAPE_ANNOTATIONS = {
  [`${SCRAPE_ANNOTATION_PREFIX}scrape`]: 'true',
  [`${SCRAPE_ANNOTATION_PREFIX}port`]: String(RUNNER_METRICS_PORT),
  [`${SCRAPE_ANNOTATION_PREFIX}path`]: '/metrics',
};

/**
 * The runner keeps its sockets in /tmp of its own root file system: an emptyDir would make
 * `kubectl drain` refuse the node unless given --delete-emptydir-data (it counts them as local data).
 */
const RUNNER_CONTAINER_SECURITY = { ...RESTRICTED_CONTAINER_SECURITY, readOnlyRootFilesystem: false };

export interface RunnerPodOptions {
  name: string;
  /** The runner image (and pull policy) when the VM does not name one. */
  defaultRunnerImage: RunnerImage;
  /** The claims to mount (runnerClaims()). */
  claims: RunnerClaim[];
  /** Name of the VM's display-password Secret, when one exists. */
  displaySecretName?: string;
  /** Whether the namespace has the PVC `vmop-image-repository` (mounted read-only when it does). */
  hasImageRepository?: boolean;
  /** Divide the VM's CPUs and RAM by these for the pod's default requests (VM-Operator's). */
  overcommit?: Overcommit;
  /** Ask for /dev/kvm from vmop's node agent (KVM_DEVICE); off where nodes have no KVM (QEMU emulates). */
  kvm?: boolean;
  /** The NIC with the VM's own address: the node agent makes its tap in the pod (address/routed-nic.ts). */
  routedNic?: RoutedNic;
}

/** A tap network on a host bridge needs the node's network and a privileged pod (VM-Operator's). */
export const usesHostNetwork = (vm: VirtualMachine) => vm.spec.vm.networks.some((network) => network.tap);

export interface Overcommit {
  cpu: number;
  ram: number;
}

/** VM-Operator's defaults: CPUs are shared more readily than RAM. */
export const DEFAULT_OVERCOMMIT: Overcommit = { cpu: 2, ram: 1.25 };

/** What the runner itself (node, QEMU's own memory, swtpm) needs beside the guest. */
export const RUNNER_OVERHEAD = { cpuMillis: 100, memoryBytes: 192 * 1024 * 1024 };

/** The pod's annotations as a file (downward API): how the runner learns of a migration. */
export const POD_INFO_VOLUME = 'podinfo';
const POD_INFO_DIR = '/etc/opt/vmrunner/podinfo';
/** The VM's migration key (a Secret vmop makes when the VM first migrates; optional until then). */
export const MIGRATION_KEYS_VOLUME = 'migration-keys';
const MIGRATION_KEYS_DIR = '/etc/opt/vmrunner/migration';
/** The Secret holding a VM's migration key. */
export const migrationSecretName = (vmName: string) => `${vmName}-migration`;

/** The value of LABEL_COMPONENT on runner pods (VM-Operator's). */
export const RUNNER_COMPONENT = 'vm-runner';

const isEmpty = (resources: VirtualMachine['spec']['resources']) =>
  !resources ||
  (Object.keys(resources.limits ?? {}).length === 0 && Object.keys(resources.requests ?? {}).length === 0);

/**
 * The runner container's resources: the VM's own `spec.resources` when it has any, else requests
 * derived from the CPUs and RAM the guest runs with, so a VM pod is never BestEffort.
 */
export function runnerResources(
  vm: VirtualMachine,
  overcommit: Overcommit = DEFAULT_OVERCOMMIT,
  kvm = false,
) {
  const own = isEmpty(vm.spec.resources)
    ? derivedRequests(vm, overcommit)
    : resourceRequirements(vm.spec.resources!);
  // An extended resource is asked for by its limit alone (its request follows).
  return kvm ? { ...own, limits: { ...own.limits, [KVM_DEVICE]: '1' } } : own;
}

/** QEMU opens the routed NIC's tap through /dev/net/tun, which the node agent gives (TUN_DEVICE). */
function withTun<T extends { limits?: Record<string, string> }>(resources: T, tun: boolean): T {
  return tun ? { ...resources, limits: { ...resources.limits, [TUN_DEVICE]: '1' } } : resources;
}

function derivedRequests(
  vm: VirtualMachine,
  overcommit: Overcommit,
): { requests: Record<string, string>; limits?: Record<string, string> } {
  const def = vm.spec.vm;
  const cpus = def.currentCpus ?? maximumCpus(def);
  const ramBytes = parseMemorySize(def.currentRam ?? def.maximumRam) ?? 0;
  // A core fraction (the VM's, or its class's) is the request per CPU; else the chart's overcommit.
  const cpuMillis =
    (def.coreFraction
      ? cpus * Number(def.coreFraction.slice(0, -1)) * 10
      : Math.ceil((cpus * 1000) / overcommit.cpu)) + RUNNER_OVERHEAD.cpuMillis;
  const memoryBytes = Math.floor(ramBytes / overcommit.ram) + RUNNER_OVERHEAD.memoryBytes;
  return { requests: { cpu: `${cpuMillis}m`, memory: String(memoryBytes) } };
}

/** Seconds kubelet waits beyond powerdownTimeout before it kills the runner. */
const GRACE_MARGIN_SECONDS = 5;

export interface RunnerImage {
  image: string;
  pullPolicy?: PullPolicy;
}

export type PullPolicy = 'Always' | 'IfNotPresent' | 'Never';

/** The VM's own `spec.image`, or the manager's default runner image (and its pull policy). */
export function runnerImage(vm: VirtualMachine, defaultImage: RunnerImage): RunnerImage {
  const spec = vm.spec.image;
  if (!spec) return defaultImage;
  const image = spec.source ?? `${spec.repository}/${spec.path}${spec.version ? `:${spec.version}` : ''}`;
  return { image, ...(spec.pullPolicy && { pullPolicy: spec.pullPolicy }) };
}

/** The grace period covers powerdownTimeout, as the pod's spec has it when it is made. */
export const gracePeriodSeconds = (vm: VirtualMachine) => vm.spec.vm.powerdownTimeout + GRACE_MARGIN_SECONDS;

/**
 * A forced stop's grace period: kubelet sends SIGTERM (the runner presses the power button) and
 * kills it a second later. Kubelet keeps the grace period of the first deletion it acts on, so
 * whoever deletes the pod of a forced stop must use this one.
 */
export const FORCED_GRACE_SECONDS = 1;

/** The grace period of a stop, forced when the VM's operation in flight is a forced Stop or Restart. */
export function stopGraceSeconds(vm: VirtualMachine, inFlight: VirtualMachineOperation | undefined): number {
  const forced = inFlight?.spec.force && (inFlight.spec.type === 'Stop' || inFlight.spec.type === 'Restart');
  return forced ? FORCED_GRACE_SECONDS : gracePeriodSeconds(vm);
}

/**
 * The VM's own labels, which its pods carry too (so pod affinity and anti-affinity rules can name
 * VMs, as Deckhouse's virtualMachineAndPodAntiAffinity does), under vmop's own.
 */
export function runnerPodLabels(vm: VirtualMachine): Record<string, string> {
  const own = Object.fromEntries(
    Object.entries(vm.metadata.labels ?? {}).filter(([key]) => !key.startsWith('app.kubernetes.io/')),
  );
  const vmClass = vm.spec.vm.virtualMachineClassName;
  return {
    ...own,
    ...vmLabels(vm.metadata.name),
    [LABEL_COMPONENT]: RUNNER_COMPONENT,
    // The class the pod was made from (named, or the default): it is in use while the pod is.
    ...(vmClass && { [CLASS_LABEL]: vmClass }),
  };
}

/** The runner pod's volumes and where the runner container has them. */
function runnerVolumes(vm: VirtualMachine, options: RunnerPodOptions) {
  const name = vm.metadata.name;
  const volumes: V1Volume[] = [{ name: 'config', configMap: { name } }];
  const volumeMounts: V1VolumeMount[] = [{ name: 'config', mountPath: CONFIG_DIR, readOnly: true }];
  const mount = (volume: V1Volume, mountPath: string, readOnly = true) => {
    volumes.push(volume);
    volumeMounts.push({ name: volume.name, mountPath, ...(readOnly && { readOnly }) });
  };
  for (const claim of options.claims) {
    const volume = { name: claim.volume, persistentVolumeClaim: { claimName: claim.claimName } };
    if (claim.volume === RUNNER_DATA_CLAIM) mount(volume, DATA_DIR, false);
    else volumes.push(volume); // a disk: a block device (volumeDevices)
  }
  if (options.displaySecretName)
    mount({ name: 'display-secret', secret: { secretName: options.displaySecretName } }, DISPLAY_SECRET_DIR);
  // Provisioning Secrets reach the runner as files only: never the ConfigMap, status or the queue.
  const secretVolumes = [
    ['cloud-init-secret', vm.spec.cloudInit?.secretRef?.name, CLOUD_INIT_SECRET_DIR],
    ['sysprep-secret', vm.spec.sysprep?.secretRef.name, SYSPREP_SECRET_DIR],
  ] as const;
  for (const [volume, secretName, mountPath] of secretVolumes)
    if (secretName) mount({ name: volume, secret: { secretName } }, mountPath);
  // Live migration: the request arrives as an annotation, the key as a Secret made when needed.
  mount(
    {
      name: POD_INFO_VOLUME,
      downwardAPI: { items: [{ path: 'annotations', fieldRef: { fieldPath: 'metadata.annotations' } }] },
    },
    POD_INFO_DIR,
  );
  mount(
    { name: MIGRATION_KEYS_VOLUME, secret: { secretName: migrationSecretName(name), optional: true } },
    MIGRATION_KEYS_DIR,
  );
  if (options.hasImageRepository) {
    const claim = { claimName: IMAGE_REPOSITORY_CLAIM, readOnly: true };
    mount({ name: IMAGE_REPOSITORY_CLAIM, persistentVolumeClaim: claim }, IMAGE_REPOSITORY_DIR);
  }
  return { volumes, volumeMounts };
}

/** The runner's environment: its VM's key, its pod, where migration requests and keys are, Redis. */
function runnerEnv(vm: VirtualMachine): V1EnvVar[] {
  return [
    ...(usesHostNetwork(vm) ? [] : [{ name: 'VMOP_METRICS_PORT', value: String(RUNNER_METRICS_PORT) }]),
    { name: 'VMOP_NODE_NAME', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
    { name: 'VMOP_VM_KEY', value: vmKey(vm.metadata.namespace!, vm.metadata.name) },
    { name: 'VMOP_POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
    { name: 'VMOP_POD_UID', valueFrom: { fieldRef: { fieldPath: 'metadata.uid' } } },
    { name: 'VMOP_POD_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } },
    { name: 'VMOP_POD_INFO', value: `${POD_INFO_DIR}/annotations` },
    { name: 'VMOP_MIGRATION_KEYS', value: MIGRATION_KEYS_DIR },
    {
      name: 'VMOP_REDIS_URL',
      valueFrom: { secretKeyRef: { name: RUNNER_SECRET, key: RUNNER_REDIS_URL_KEY } },
    },
  ];
}

/**
 * Restricted, and the ports below 1024 the runner listens on opened by a safe, per-pod sysctl: the
 * DHCP port (67) on a routed NIC, and the guest ports QEMU forwards from the pod.
 */
function podSecurity(vm: VirtualMachine, routed: boolean) {
  const forwarded = vm.spec.vm.networks.flatMap((network) => network.user?.ports ?? []).map((p) => p.port);
  const lowest = Math.min(...(routed ? [67] : []), ...forwarded);
  if (lowest >= 1024) return RESTRICTED_POD_SECURITY;
  return {
    ...RESTRICTED_POD_SECURITY,
    sysctls: [{ name: 'net.ipv4.ip_unprivileged_port_start', value: String(lowest) }],
  };
}

/** A runner pod of `vm`. */
export function desiredRunnerPod(vm: VirtualMachine, options: RunnerPodOptions): V1Pod {
  const namespace = vm.metadata.namespace!;
  const { image, pullPolicy } = runnerImage(vm, options.defaultRunnerImage);
  const { volumes, volumeMounts } = runnerVolumes(vm, options);
  const env = runnerEnv(vm);
  const { spec } = vm;
  const hostNetwork = usesHostNetwork(vm);
  const routedNic = hostNetwork ? undefined : options.routedNic;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: options.name,
      namespace,
      labels: runnerPodLabels(vm),
      // What the pod was made from: status.restartAwaitingChanges compares it with the spec.
      annotations: {
        [POD_SPEC_ANNOTATION]: JSON.stringify(podSpecOfVm(vm)),
        ...(!hostNetwork && SCRAPE_ANNOTATIONS),
        ...(routedNic && { [ROUTED_NIC_ANNOTATION]: JSON.stringify(routedNic) }),
      },
      // The VM controls it: `kubectl drain` evicts it like any replicated pod, and it goes with the VM.
      ownerReferences: [ownerReference(vm)],
    },
    spec: {
      containers: [
        {
          name: RUNNER_CONTAINER,
          image,
          ...(pullPolicy && { imagePullPolicy: pullPolicy }),
          args: ['runner', '--config', `${CONFIG_DIR}/config.yaml`],
          env,
          ...(!hostNetwork && {
            ports: [{ name: 'metrics', containerPort: RUNNER_METRICS_PORT }],
            readinessProbe: GUEST_RUNS_HERE_PROBE,
          }),
          volumeMounts,
          volumeDevices: options.claims
            .filter((claim) => claim.block)
            .map((claim) => ({ name: claim.volume, devicePath: `/dev/${claim.volume}` })),
          // Tap devices on a host bridge need it (as VM-Operator's runner pods have); nothing else does.
          securityContext: hostNetwork ? { privileged: true } : RUNNER_CONTAINER_SECURITY,
          resources: withTun(runnerResources(vm, options.overcommit, options.kvm), routedNic !== undefined),
        },
      ],
      ...(!hostNetwork && { securityContext: podSecurity(vm, routedNic !== undefined) }),
      // kubelet restarts a runner that crashed (QEMU with it); vmop makes a new pod when one is lost.
      restartPolicy: 'Always',
      volumes,
      // Host network, yet cluster DNS: the runner reaches Redis by its Service name.
      ...(hostNetwork && { hostNetwork, dnsPolicy: 'ClusterFirstWithHostNet' }),
      // The runner needs no Kubernetes API access: status flows back through Redis.
      serviceAccountName: RUNNER_SERVICE_ACCOUNT,
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      terminationGracePeriodSeconds: gracePeriodSeconds(vm),
      ...(spec.nodeName && { nodeName: spec.nodeName }),
      ...(spec.nodeSelector && { nodeSelector: spec.nodeSelector }),
      ...(spec.affinity && { affinity: spec.affinity as never }),
      ...(spec.tolerations && { tolerations: spec.tolerations }),
    },
  };
}
