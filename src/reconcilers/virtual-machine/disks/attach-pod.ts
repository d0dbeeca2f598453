// The pod that brings a disk added at runtime to the running VM (pure). A running pod's volumes
// cannot change, so the claim goes into a pod of its own on the runner's node, where qemu-nbd (from
// the runner image) exports it over NBD, TLS with the VM's pre-shared key; the runner's QEMU opens
// that export. No privileges, no node agent, no Kubernetes API access.
import { RESTRICTED_CONTAINER_SECURITY, RESTRICTED_POD_SECURITY } from '../pod-security.js';
import type { V1Affinity, V1OwnerReference, V1Pod, V1Toleration } from '@kubernetes/client-node';
import type { VirtualMachine } from '../../../api/virtual-machine.js';
import { LABEL_COMPONENT, LABEL_VOLUME, ownerReference, vmLabels } from '../naming.js';
import { RUNNER_SERVICE_ACCOUNT } from '../runner-config/identity.js';
import { migrationSecretName, type RunnerImage } from '../runner-pod/pod.js';

export const ATTACHMENT_COMPONENT = 'disk-attachment';
/** The NBD port (IANA's), on the pod's own address. */
export const NBD_PORT = 10809;
export const NBD_EXPORT = 'disk';

const DEVICE = '/dev/vmop-disk';
const KEYS_DIR = '/etc/vmop/keys';

export const attachPodName = (vmName: string, volume: string) => `${vmName}-attach-${volume}`;

export const isAttachPod = (pod: V1Pod) => pod.metadata?.labels?.[LABEL_COMPONENT] === ATTACHMENT_COMPONENT;

export function desiredAttachPod(
  vm: VirtualMachine,
  disk: { volume: string; claimName: string },
  nodeName: string,
  image: RunnerImage,
): V1Pod {
  const { name, namespace } = vm.metadata;
  return nbdExportPod({
    name: attachPodName(name, disk.volume),
    namespace: namespace!,
    labels: { ...vmLabels(name), [LABEL_COMPONENT]: ATTACHMENT_COMPONENT, [LABEL_VOLUME]: disk.volume },
    ownerReference: ownerReference(vm),
    claimName: disk.claimName,
    keysSecret: migrationSecretName(name),
    image,
    nodeName,
    ...(vm.spec.tolerations && { tolerations: vm.spec.tolerations }),
  });
}

/** Runs a pod on `nodeName` only, through the scheduler (which says why when it cannot). */
export const onNodeAffinity = (nodeName: string): V1Affinity => ({
  nodeAffinity: {
    requiredDuringSchedulingIgnoredDuringExecution: {
      nodeSelectorTerms: [{ matchFields: [{ key: 'metadata.name', operator: 'In', values: [nodeName] }] }],
    },
  },
});

/**
 * A pod whose qemu-nbd serves one claim (a raw block device) to one client over TLS with the VM's
 * key: a disk attached at runtime, or the copy a snapshot of a running VM is written into.
 */
export function nbdExportPod(options: {
  name: string;
  namespace: string;
  labels: Record<string, string>;
  ownerReference: V1OwnerReference;
  claimName: string;
  /** The Secret with the VM's pre-shared key (`keys.psk`). */
  keysSecret: string;
  image: RunnerImage;
  /** Where it must run (the claim is used there already); where the scheduler puts it when absent. */
  nodeName?: string;
  tolerations?: V1Toleration[];
}): V1Pod {
  const { image, nodeName } = options;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: options.name,
      namespace: options.namespace,
      labels: options.labels,
      ownerReferences: [options.ownerReference],
    },
    spec: {
      containers: [
        {
          name: 'export',
          image: image.image,
          ...(image.pullPolicy && { imagePullPolicy: image.pullPolicy }),
          command: ['qemu-nbd'],
          args: [
            ...['--object', `tls-creds-psk,id=tls0,endpoint=server,dir=${KEYS_DIR}`, '--tls-creds', 'tls0'],
            ...['--format', 'raw', '--cache', 'none', '--aio', 'native', '--discard', 'unmap'],
            // One client (the VM's QEMU), served again after it reconnects (a runner restart).
            ...['--persistent', '--shared', '1', '--export-name', NBD_EXPORT],
            ...['--bind', '0.0.0.0', '--port', String(NBD_PORT)],
            DEVICE,
          ],
          ports: [{ name: 'nbd', containerPort: NBD_PORT }],
          // No probe: qemu-nbd listens within moments of its start, and the runner tries a refused
          // connection again at once (a probe's period would add a second or more to every attach).
          volumeDevices: [{ name: 'disk', devicePath: DEVICE }],
          volumeMounts: [{ name: 'keys', mountPath: KEYS_DIR, readOnly: true }],
          securityContext: RESTRICTED_CONTAINER_SECURITY,
          resources: { requests: { cpu: '10m', memory: '32Mi' }, limits: { memory: '256Mi' } },
        },
      ],
      securityContext: RESTRICTED_POD_SECURITY,
      volumes: [
        { name: 'disk', persistentVolumeClaim: { claimName: options.claimName } },
        { name: 'keys', secret: { secretName: options.keysSecret } },
      ],
      serviceAccountName: RUNNER_SERVICE_ACCOUNT,
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      // Through the scheduler: a claim on another node says so (volume node affinity conflict),
      // and a node-local claim not bound yet binds there.
      ...(nodeName && { affinity: onNodeAffinity(nodeName) }),
      ...(options.tolerations && { tolerations: options.tolerations }),
    },
  };
}
