import type {
  V1EnvVar,
  V1PersistentVolumeClaim,
  V1StatefulSet,
  V1Volume,
  V1VolumeMount,
} from '@kubernetes/client-node';
import type { VirtualMachine } from '../../api/virtual-machine.js';
import {
  APP_NAME,
  CONFIG_DIR,
  DATA_DIR,
  DISPLAY_SECRET_DIR,
  CLOUD_INIT_SECRET_DIR,
  SYSPREP_SECRET_DIR,
  IMAGE_REPOSITORY_CLAIM,
  IMAGE_REPOSITORY_DIR,
  LABEL_INSTANCE,
  LABEL_NAME,
  POD_SPEC_ANNOTATION,
  RUNNER_CONTAINER,
  RUNNER_DATA_CLAIM,
  diskVolumeName,
  ownerReference,
  vmKey,
  vmLabels,
} from './naming.js';
import { parseMemorySize } from '../../api/runner-config.js';
import { podSpecOfVm } from './restart-awaiting.js';
import { maximumCpus } from './runner-config.js';
import { RUNNER_REDIS_URL_KEY, RUNNER_SECRET, RUNNER_SERVICE_ACCOUNT } from './runner-identity.js';

export interface StatefulSetOptions {
  /** The runner image (and pull policy) when the VM does not name one. */
  defaultRunnerImage: RunnerImage;
  /** Name of the VM's display-password Secret, when one exists. */
  displaySecretName?: string;
  /** Whether the namespace has the PVC `vmop-image-repository` (mounted read-only when it does). */
  hasImageRepository?: boolean;
  /** Divide the VM's CPUs and RAM by these for the pod's default requests (VM-Operator's). */
  overcommit?: Overcommit;
  /** The grace period the current StatefulSet's pod template has, if it exists. */
  currentGracePeriodSeconds?: number;
}

export interface Overcommit {
  cpu: number;
  ram: number;
}

/** VM-Operator's defaults: CPUs are shared more readily than RAM. */
export const DEFAULT_OVERCOMMIT: Overcommit = { cpu: 2, ram: 1.25 };

/** What the runner itself (node, QEMU's own memory, swtpm) needs beside the guest. */
export const RUNNER_OVERHEAD = { cpuMillis: 100, memoryBytes: 192 * 1024 * 1024 };

type Quantities = Record<string, string | number> | undefined;

/** Kubernetes wants quantities as strings in typed objects; the CRD also admits integers. */
function quantityStrings(values: Quantities): Record<string, string> | undefined {
  return values && Object.fromEntries(Object.entries(values).map(([key, value]) => [key, String(value)]));
}

function resourceRequirements(resources: { limits?: Quantities; requests?: Quantities }) {
  return {
    ...(resources.limits && { limits: quantityStrings(resources.limits) }),
    ...(resources.requests && { requests: quantityStrings(resources.requests) }),
  };
}

const isEmpty = (resources: { limits?: Quantities; requests?: Quantities } | undefined) =>
  !resources ||
  (Object.keys(resources.limits ?? {}).length === 0 && Object.keys(resources.requests ?? {}).length === 0);

/**
 * The runner container's resources: the VM's own `spec.resources` when it has any, else requests
 * derived from the CPUs and RAM the guest runs with, so a VM pod is never BestEffort.
 */
export function runnerResources(vm: VirtualMachine, overcommit: Overcommit = DEFAULT_OVERCOMMIT) {
  if (!isEmpty(vm.spec.resources)) return resourceRequirements(vm.spec.resources!);
  const def = vm.spec.vm;
  const cpus = def.currentCpus ?? maximumCpus(def);
  const ramBytes = parseMemorySize(def.currentRam ?? def.maximumRam) ?? 0;
  const cpuMillis = Math.ceil((cpus * 1000) / overcommit.cpu) + RUNNER_OVERHEAD.cpuMillis;
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

/**
 * The grace period must cover powerdownTimeout. powerdownTimeout changes at runtime, and a pod
 * template change must not be caused by a runtime change, so the period only ever grows.
 */
export function gracePeriodSeconds(vm: VirtualMachine, current: number | undefined): number {
  const needed = vm.spec.vm.powerdownTimeout + GRACE_MARGIN_SECONDS;
  return current !== undefined && current >= needed ? current : needed;
}

function diskClaimTemplates(vm: VirtualMachine): V1PersistentVolumeClaim[] {
  return vm.spec.vm.disks.flatMap((disk, index) => {
    const template = disk.volumeClaimTemplate;
    if (!template) return [];
    const { resources, ...claimSpec } = template.spec ?? {};
    return [
      {
        apiVersion: 'v1',
        kind: 'PersistentVolumeClaim',
        metadata: {
          name: diskVolumeName(disk, index),
          labels: { ...template.metadata?.labels, ...vmLabels(vm.metadata.name) },
          ...(template.metadata?.annotations && { annotations: template.metadata.annotations }),
        },
        spec: {
          accessModes: ['ReadWriteOnce'],
          volumeMode: 'Block',
          ...claimSpec,
          ...(resources && { resources: resourceRequirements(resources) }),
        },
      },
    ];
  });
}

/** The runner's own persistent state (machine uuid, firmware variables, TPM state, template copy). */
function runnerDataClaimTemplate(vm: VirtualMachine): V1PersistentVolumeClaim {
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: { name: RUNNER_DATA_CLAIM, labels: vmLabels(vm.metadata.name) },
    spec: {
      accessModes: ['ReadWriteOnce'],
      volumeMode: 'Filesystem',
      resources: { requests: { storage: '1Mi' } },
    },
  };
}

/** The StatefulSet `<vm>` that runs the VM's runner pod (replicas 1 when Running, else 0). */
export function desiredStatefulSet(vm: VirtualMachine, options: StatefulSetOptions): V1StatefulSet {
  const name = vm.metadata.name;
  const namespace = vm.metadata.namespace!;
  const { image, pullPolicy } = runnerImage(vm, options.defaultRunnerImage);
  const disks = diskClaimTemplates(vm);
  const volumes: V1Volume[] = [{ name: 'config', configMap: { name } }];
  const volumeMounts: V1VolumeMount[] = [
    { name: 'config', mountPath: CONFIG_DIR, readOnly: true },
    { name: RUNNER_DATA_CLAIM, mountPath: DATA_DIR },
  ];
  if (options.displaySecretName) {
    volumes.push({ name: 'display-secret', secret: { secretName: options.displaySecretName } });
    volumeMounts.push({ name: 'display-secret', mountPath: DISPLAY_SECRET_DIR, readOnly: true });
  }
  // Provisioning Secrets reach the runner as files only: never the ConfigMap, status or the queue.
  const secretVolumes = [
    ['cloud-init-secret', vm.spec.cloudInit?.secretRef?.name, CLOUD_INIT_SECRET_DIR],
    ['sysprep-secret', vm.spec.sysprep?.secretRef.name, SYSPREP_SECRET_DIR],
  ] as const;
  for (const [volume, secretName, mountPath] of secretVolumes) {
    if (!secretName) continue;
    volumes.push({ name: volume, secret: { secretName } });
    volumeMounts.push({ name: volume, mountPath, readOnly: true });
  }
  if (options.hasImageRepository) {
    volumes.push({
      name: IMAGE_REPOSITORY_CLAIM,
      persistentVolumeClaim: { claimName: IMAGE_REPOSITORY_CLAIM, readOnly: true },
    });
    volumeMounts.push({ name: IMAGE_REPOSITORY_CLAIM, mountPath: IMAGE_REPOSITORY_DIR, readOnly: true });
  }
  const env: V1EnvVar[] = [
    { name: 'VMOP_VM_KEY', value: vmKey(namespace, name) },
    { name: 'VMOP_POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
    { name: 'VMOP_POD_UID', valueFrom: { fieldRef: { fieldPath: 'metadata.uid' } } },
    {
      name: 'VMOP_REDIS_URL',
      valueFrom: { secretKeyRef: { name: RUNNER_SECRET, key: RUNNER_REDIS_URL_KEY } },
    },
  ];
  const { spec } = vm;
  return {
    apiVersion: 'apps/v1',
    kind: 'StatefulSet',
    metadata: { name, namespace, labels: vmLabels(name), ownerReferences: [ownerReference(vm)] },
    spec: {
      replicas: spec.vm.state === 'Running' ? 1 : 0,
      serviceName: name,
      selector: { matchLabels: { [LABEL_NAME]: APP_NAME, [LABEL_INSTANCE]: name } },
      // A template change must never restart a running VM: new pods pick it up on their next start.
      updateStrategy: { type: 'OnDelete' },
      // Disks are precious: deleting the VM (and so this StatefulSet) keeps the PVCs.
      persistentVolumeClaimRetentionPolicy: { whenDeleted: 'Retain', whenScaled: 'Retain' },
      template: {
        metadata: {
          labels: vmLabels(name),
          // What the pod was made from: status.restartAwaitingChanges compares it with the spec.
          annotations: { [POD_SPEC_ANNOTATION]: JSON.stringify(podSpecOfVm(vm)) },
        },
        spec: {
          containers: [
            {
              name: RUNNER_CONTAINER,
              image,
              ...(pullPolicy && { imagePullPolicy: pullPolicy }),
              args: ['runner', '--config', `${CONFIG_DIR}/config.yaml`],
              env,
              volumeMounts,
              volumeDevices: disks.map((claim) => ({
                name: claim.metadata!.name!,
                devicePath: `/dev/${claim.metadata!.name!}`,
              })),
              // /dev/kvm and tap devices on the bridge need it (as VM-Operator's runner pods have).
              securityContext: { privileged: true },
              resources: runnerResources(vm, options.overcommit),
            },
          ],
          volumes,
          hostNetwork: true,
          // Host network, yet cluster DNS: the runner reaches Redis by its Service name.
          dnsPolicy: 'ClusterFirstWithHostNet',
          // The runner needs no Kubernetes API access: status flows back through Redis.
          serviceAccountName: RUNNER_SERVICE_ACCOUNT,
          automountServiceAccountToken: false,
          enableServiceLinks: false,
          terminationGracePeriodSeconds: gracePeriodSeconds(vm, options.currentGracePeriodSeconds),
          ...(spec.nodeName && { nodeName: spec.nodeName }),
          ...(spec.nodeSelector && { nodeSelector: spec.nodeSelector }),
          ...(spec.affinity && { affinity: spec.affinity as never }),
          ...(spec.tolerations && { tolerations: spec.tolerations }),
        },
      },
      volumeClaimTemplates: [runnerDataClaimTemplate(vm), ...disks],
    },
  };
}
