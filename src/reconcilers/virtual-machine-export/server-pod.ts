// The objects that serve a VirtualMachineExport (pure): its token Secret, its pod (`vmop
// export-server` from the runner image, which has qemu-img; the claims read-only; Pod Security
// restricted, no Kubernetes API access, HTTPS with the export's certificate) and the Service in
// front of it.
import type { V1Pod, V1Secret, V1Service } from '@kubernetes/client-node';
import {
  EXPORT_PORT,
  exportServerName,
  exportTokenSecretName,
  type VirtualMachineExport,
} from '../../api/virtual-machine-export.js';
import { TLS_CERT, TLS_KEY, type ServerCertificate } from '../../export/certificate.js';
import { RESTRICTED_CONTAINER_SECURITY, RESTRICTED_POD_SECURITY } from '../virtual-machine/pod-security.js';
import { LABEL_COMPONENT, exportLabels, ownerReference } from '../virtual-machine/naming.js';
import { RUNNER_SERVICE_ACCOUNT } from '../virtual-machine/runner-config/identity.js';
import type { RunnerImage } from '../virtual-machine/runner-pod/pod.js';

export const EXPORT_SERVER_COMPONENT = 'disk-export-server';
const TOKEN_DIR = '/etc/vmop/export';
const SCRATCH_DIR = '/scratch';

/** A disk the pod serves: its name and the claim that holds it. */
export interface ServedDisk {
  name: string;
  claimName: string;
}

const deviceOf = (disk: string) => `/dev/vmop-export-${disk}`;

const serverLabels = (exportName: string) => ({
  ...exportLabels(exportName),
  [LABEL_COMPONENT]: EXPORT_SERVER_COMPONENT,
});

/** The export's token and its server's TLS certificate and key. */
export function exportTokenSecret(
  vmExport: VirtualMachineExport,
  token: string,
  tls: ServerCertificate,
): V1Secret {
  const { name, namespace } = vmExport.metadata;
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    type: 'Opaque',
    metadata: {
      name: exportTokenSecretName(name),
      namespace,
      labels: exportLabels(name),
      ownerReferences: [ownerReference(vmExport)],
    },
    stringData: { token, [TLS_CERT]: tls.cert, [TLS_KEY]: tls.key },
  };
}

export function exportServerPod(
  vmExport: VirtualMachineExport,
  disks: ServedDisk[],
  expiresAt: Date,
  image: RunnerImage,
): V1Pod {
  const { name, namespace } = vmExport.metadata;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: exportServerName(name),
      namespace,
      labels: serverLabels(name),
      ownerReferences: [ownerReference(vmExport)],
    },
    spec: {
      containers: [
        {
          name: 'server',
          image: image.image,
          ...(image.pullPolicy && { imagePullPolicy: image.pullPolicy }),
          args: [
            'export-server',
            ...disks.flatMap((disk) => ['--disk', `${disk.name}=${deviceOf(disk.name)}`]),
            ...['--token-file', `${TOKEN_DIR}/token`, '--expires-at', expiresAt.toISOString()],
            ...['--tls-cert', `${TOKEN_DIR}/${TLS_CERT}`, '--tls-key', `${TOKEN_DIR}/${TLS_KEY}`],
            ...['--scratch', SCRATCH_DIR, '--port', String(EXPORT_PORT)],
          ],
          ports: [{ name: 'https', containerPort: EXPORT_PORT }],
          // Ready once every disk's qcow2 image is made: the export says Ready then.
          readinessProbe: {
            httpGet: { path: '/healthz', port: EXPORT_PORT, scheme: 'HTTPS' },
            periodSeconds: 2,
          },
          volumeDevices: disks.map((disk) => ({
            name: `disk-${disk.name}`,
            devicePath: deviceOf(disk.name),
          })),
          volumeMounts: [
            { name: 'token', mountPath: TOKEN_DIR, readOnly: true },
            { name: 'scratch', mountPath: SCRATCH_DIR },
          ],
          securityContext: RESTRICTED_CONTAINER_SECURITY,
          resources: { requests: { cpu: '100m', memory: '64Mi' }, limits: { memory: '256Mi' } },
        },
      ],
      securityContext: RESTRICTED_POD_SECURITY,
      // A server that fails says why (its export fails); one whose node went is made again.
      restartPolicy: 'Never',
      volumes: [
        ...disks.map((disk) => ({
          name: `disk-${disk.name}`,
          persistentVolumeClaim: { claimName: disk.claimName, readOnly: true },
        })),
        { name: 'token', secret: { secretName: exportTokenSecretName(name) } },
        { name: 'scratch', emptyDir: {} },
      ],
      serviceAccountName: RUNNER_SERVICE_ACCOUNT,
      automountServiceAccountToken: false,
      enableServiceLinks: false,
    },
  };
}

export function exportService(vmExport: VirtualMachineExport): V1Service {
  const { name, namespace } = vmExport.metadata;
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: {
      name: exportServerName(name),
      namespace,
      labels: exportLabels(name),
      ownerReferences: [ownerReference(vmExport)],
    },
    spec: {
      selector: serverLabels(name),
      ports: [{ name: 'https', port: EXPORT_PORT, targetPort: EXPORT_PORT }],
    },
  };
}

export const isExportServerPod = (pod: V1Pod) =>
  pod.metadata?.labels?.[LABEL_COMPONENT] === EXPORT_SERVER_COMPONENT;
