// The pod that imports a disk's source into its claim (pure): `vmop import` from the runner image
// (it has qemu-img and xz), the claim as a raw block device, no privileges, no Kubernetes API
// access; progress goes to Redis with the runner credential, the outcome into its termination
// message. It never restarts itself: the manager decides what a failed or lost import means.
import { RESTRICTED_CONTAINER_SECURITY, RESTRICTED_POD_SECURITY } from '../pod-security.js';
import type { V1OwnerReference, V1Pod, V1PodSpec } from '@kubernetes/client-node';
import type { ImportSource, VirtualMachine } from '../../../api/virtual-machine.js';
import { UPLOAD_PORT } from '../../../api/virtual-machine-image.js';
import { TLS_CERT, TLS_KEY } from '../../../export/certificate.js';
import type { ImportDisk } from './imports.js';
import {
  IMPORT_SOURCE_ANNOTATION,
  LABEL_COMPONENT,
  LABEL_VOLUME,
  ownerReference,
  sourceDigest,
  vmKey,
  vmLabels,
} from '../naming.js';
import { IMPORTER_REDIS_URL_KEY, RUNNER_SECRET, RUNNER_SERVICE_ACCOUNT } from '../runner-config/identity.js';
import type { RunnerImage } from '../runner-pod/pod.js';

export const IMPORTER_COMPONENT = 'disk-importer';

const DEVICE = '/dev/vmop-disk';
const SCRATCH_DIR = '/scratch';
/** A `pvc` source's claim, read-only. */
const SOURCE_DEVICE = '/dev/vmop-source';
/** A copy of a file-system claim (a runner's data): both claims mounted. */
const TARGET_DIR = '/vmop-target';
const SOURCE_DIR = '/vmop-source';
/** An upload's token, certificate and key. */
const UPLOAD_DIR = '/vmop-upload';

export const importerPodName = (vmName: string, volume: string) => `${vmName}-import-${volume}`;

export const isImporterPod = (pod: V1Pod) => pod.metadata?.labels?.[LABEL_COMPONENT] === IMPORTER_COMPONENT;

/** Where the importer may not fetch from (`vmop import --deny`), and exceptions (`--allow`). */
export interface ImportDestinations {
  deny: string[];
  allow: string[];
}
const NO_RULES: ImportDestinations = { deny: [], allow: [] };

/** Whose import it is: a VM's disk, or an image. */
export interface ImportOwner {
  podName: string;
  namespace: string;
  labels: Record<string, string>;
  ownerReference: V1OwnerReference;
  /** The work-queue key its progress is sent for; none: the importer logs it. */
  key?: string;
  /** An upload's: the Secret with its token and the server's certificate and key. */
  uploadSecret?: string;
  /** Where it may run (a VM's placement). */
  placement?: Pick<V1PodSpec, 'nodeName' | 'nodeSelector' | 'affinity' | 'tolerations'>;
}

export function desiredImporterPod(
  vm: VirtualMachine,
  disk: ImportDisk,
  image: RunnerImage,
  destinations: ImportDestinations = NO_RULES,
): V1Pod {
  const { name, namespace } = vm.metadata;
  const { spec } = vm;
  return importerPod(
    {
      podName: importerPodName(name, disk.volume),
      namespace: namespace!,
      labels: vmLabels(name),
      ownerReference: ownerReference(vm),
      key: vmKey(namespace!, name),
      // Where the VM may run: a node-local claim binds where its first pod (this one) runs.
      placement: {
        ...(spec.nodeName && { nodeName: spec.nodeName }),
        ...(spec.nodeSelector && { nodeSelector: spec.nodeSelector }),
        ...(spec.affinity && { affinity: spec.affinity as never }),
        ...(spec.tolerations && { tolerations: spec.tolerations }),
      },
    },
    disk,
    image,
    destinations,
  );
}

export function importerPod(
  owner: ImportOwner,
  disk: ImportDisk,
  image: RunnerImage,
  destinations: ImportDestinations = NO_RULES,
): V1Pod {
  const { http, registry, pvc, upload }: ImportSource = disk.copyFrom ?? disk.source;
  const uploadSecret = upload && owner.uploadSecret;
  const files = disk.filesystem === true;
  const [target, source] = files ? [TARGET_DIR, SOURCE_DIR] : [DEVICE, SOURCE_DEVICE];
  const volumes = [{ name: 'disk', path: target }, ...(pvc ? [{ name: 'source', path: source }] : [])];
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: owner.podName,
      namespace: owner.namespace,
      labels: { ...owner.labels, [LABEL_COMPONENT]: IMPORTER_COMPONENT, [LABEL_VOLUME]: disk.volume },
      annotations: { [IMPORT_SOURCE_ANNOTATION]: sourceDigest(disk.source) },
      ownerReferences: [owner.ownerReference],
    },
    spec: {
      containers: [
        {
          name: 'importer',
          image: image.image,
          ...(image.pullPolicy && { imagePullPolicy: image.pullPolicy }),
          args: [
            'import',
            ...(http
              ? [
                  ...['--url', http.url],
                  ...(http.sha256 ? ['--sha256', http.sha256] : []),
                  ...(http.caCertificate ? ['--ca-certificate', http.caCertificate] : []),
                ]
              : []),
            ...(registry ? ['--image', registry.image, ...(registry.insecure ? ['--insecure'] : [])] : []),
            ...(pvc ? ['--pvc', pvc.name, '--source-device', source] : []),
            ...(uploadSecret
              ? [
                  ...['--upload-port', String(UPLOAD_PORT), '--token-file', `${UPLOAD_DIR}/token`],
                  ...['--tls-cert', `${UPLOAD_DIR}/${TLS_CERT}`, '--tls-key', `${UPLOAD_DIR}/${TLS_KEY}`],
                  ...(upload.sha256 ? ['--sha256', upload.sha256] : []),
                ]
              : []),
            ...['--target', target, '--scratch', SCRATCH_DIR, '--volume', disk.volume],
            ...destinations.deny.flatMap((rule) => ['--deny', rule]),
            ...destinations.allow.flatMap((rule) => ['--allow', rule]),
          ],
          env: owner.key
            ? [
                { name: 'VMOP_VM_KEY', value: owner.key },
                { name: 'VMOP_POD_UID', valueFrom: { fieldRef: { fieldPath: 'metadata.uid' } } },
                {
                  name: 'VMOP_REDIS_URL',
                  valueFrom: { secretKeyRef: { name: RUNNER_SECRET, key: IMPORTER_REDIS_URL_KEY } },
                },
              ]
            : [],
          ...(uploadSecret && {
            ports: [{ name: 'upload', containerPort: UPLOAD_PORT }],
            readinessProbe: {
              httpGet: { path: '/healthz', port: UPLOAD_PORT, scheme: 'HTTPS' },
              periodSeconds: 2,
            },
          }),
          ...(files
            ? {
                volumeMounts: [
                  ...volumes.map(({ name, path }) => ({
                    name,
                    mountPath: path,
                    readOnly: name === 'source',
                  })),
                  { name: 'scratch', mountPath: SCRATCH_DIR },
                ],
              }
            : {
                volumeDevices: volumes.map(({ name, path }) => ({ name, devicePath: path })),
                volumeMounts: [
                  { name: 'scratch', mountPath: SCRATCH_DIR },
                  ...(uploadSecret ? [{ name: 'upload', mountPath: UPLOAD_DIR, readOnly: true }] : []),
                ],
              }),
          securityContext: RESTRICTED_CONTAINER_SECURITY,
          resources: { requests: { cpu: '100m', memory: '128Mi' }, limits: { memory: '512Mi' } },
        },
      ],
      securityContext: RESTRICTED_POD_SECURITY,
      restartPolicy: 'Never',
      volumes: [
        { name: 'disk', persistentVolumeClaim: { claimName: disk.claimName } },
        { name: 'scratch', emptyDir: {} },
        ...(pvc ? [{ name: 'source', persistentVolumeClaim: { claimName: pvc.name, readOnly: true } }] : []),
        ...(uploadSecret ? [{ name: 'upload', secret: { secretName: uploadSecret } }] : []),
      ],
      serviceAccountName: RUNNER_SERVICE_ACCOUNT,
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      ...owner.placement,
    },
  };
}
