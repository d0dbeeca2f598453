// The reconcile of one VirtualMachineExport: reads the caches, plans (plan.ts), makes or removes the
// token Secret (with the server's certificate), the server pod and its Service, writes the status
// with Events, and comes back at the export's expiry.
import { randomBytes } from 'node:crypto';
import type { KubernetesObject, V1PersistentVolumeClaim, V1Pod, V1Secret } from '@kubernetes/client-node';
import { KIND, VirtualMachine } from '../../api/virtual-machine.js';
import {
  EXPORT_KIND,
  EXPORT_PLURAL,
  VirtualMachineExport,
  exportServerHostnames,
  exportServerName,
  exportTokenSecretName,
  parseExportKey,
  type ExportStatus,
} from '../../api/virtual-machine-export.js';
import { SNAPSHOT_KIND, VirtualMachineSnapshot } from '../../api/virtual-machine-snapshot.js';
import { TLS_CERT, selfSignedCertificate } from '../../export/certificate.js';
import {
  deletePodByUid,
  type KubeClients,
  createUnlessExists,
  deleteUnlessGone,
} from '../../kube/clients.js';
import type { ObjectCache } from '../../kube/object-cache.js';
import type { HandlerResult } from '../../queue/index.js';
import type { Logger } from '../../util/logger.js';
import { eventRecorder } from '../events.js';
import { writeStatusWithPhaseEvent } from '../status-write.js';
import { APP_NAME, LABEL_INSTANCE, LABEL_NAME } from '../virtual-machine/naming.js';
import type { RunnerImage } from '../virtual-machine/runner-pod/pod.js';
import { planExport } from './plan.js';
import { exportServerPod, exportService, exportTokenSecret } from './server-pod.js';

export interface ExportReconcilerOptions {
  clients: KubeClients;
  cache: ObjectCache;
  /** The server is `vmop export-server` in the runner image (it has qemu-img). */
  defaultRunnerImage: RunnerImage;
  logger: Logger;
  now?: () => Date;
}

/** The server's certificate outlives the export by this much (a download running at its expiry). */
const CERTIFICATE_MARGIN_MS = 3_600_000;

const REASONS = {
  Ready: 'ExportReady',
  Expired: 'ExportExpired',
  Failed: 'ExportFailed',
} as const;

export function createExportReconciler(options: ExportReconcilerOptions) {
  const { clients, cache, logger } = options;
  const now = options.now ?? (() => new Date());
  const record = eventRecorder(clients, logger, now);

  return async function reconcileExport(key: string): Promise<HandlerResult> {
    const { namespace, name } = parseExportKey(key);
    const raw = cache.get<KubernetesObject>(EXPORT_KIND, namespace, name);
    if (!raw || raw.metadata?.deletionTimestamp) return; // its pod, Service and token go with it
    const parsed = VirtualMachineExport.safeParse(raw);
    if (!parsed.success) {
      logger.warn({ key, issues: parsed.error.issues }, 'an export the CRD admitted does not parse');
      return;
    }
    const vmExport = parsed.data;
    const { virtualMachineName, virtualMachineSnapshotName } = vmExport.spec.source;
    const cachedSnapshot =
      virtualMachineSnapshotName &&
      cache.get<KubernetesObject>(SNAPSHOT_KIND, namespace, virtualMachineSnapshotName);
    const cachedVm = virtualMachineName && cache.get<KubernetesObject>(KIND, namespace, virtualMachineName);
    const vmObjects = virtualMachineName && { [LABEL_NAME]: APP_NAME, [LABEL_INSTANCE]: virtualMachineName };
    const serverName = exportServerName(name);
    const at = now();
    const plan = planExport({
      vmExport,
      vm: cachedVm ? VirtualMachine.safeParse(cachedVm).data : undefined,
      snapshot: cachedSnapshot ? VirtualMachineSnapshot.safeParse(cachedSnapshot).data : undefined,
      vmClaims: vmObjects
        ? cache.list<V1PersistentVolumeClaim>('PersistentVolumeClaim', namespace, vmObjects)
        : [],
      vmPods: vmObjects ? cache.list<V1Pod>('Pod', namespace, vmObjects) : [],
      serverPod: cache.get<V1Pod>('Pod', namespace, serverName),
      now: at,
    });
    const writes: string[] = [];
    const secret = cache.get<V1Secret>('Secret', namespace, exportTokenSecretName(name));
    let certificate = secret?.data?.[TLS_CERT] && Buffer.from(secret.data[TLS_CERT], 'base64').toString();
    if (plan.serve) {
      if (!secret) {
        // The token and certificate exist before the pod that mounts them; ones made earlier are kept.
        const token = randomBytes(32).toString('base64url');
        const tls = await selfSignedCertificate(
          exportServerHostnames(name, namespace),
          new Date(plan.expiresAt.getTime() + CERTIFICATE_MARGIN_MS),
          at,
        );
        const body = exportTokenSecret(vmExport, token, tls);
        if (await createUnlessExists(() => clients.core.createNamespacedSecret({ namespace, body }))) {
          writes.push(`Secret ${exportTokenSecretName(name)}`);
          certificate = tls.cert;
        }
      }
      if (
        await createUnlessExists(() =>
          clients.core.createNamespacedService({ namespace, body: exportService(vmExport) }),
        )
      )
        writes.push(`Service ${serverName}`);
      const pod = exportServerPod(vmExport, plan.serve, plan.expiresAt, options.defaultRunnerImage);
      if (await createUnlessExists(() => clients.core.createNamespacedPod({ namespace, body: pod })))
        writes.push(`Pod ${serverName}`);
    }
    const pod =
      plan.deleteServerPod ?? (plan.tearDown ? cache.get<V1Pod>('Pod', namespace, serverName) : undefined);
    if (
      pod?.metadata?.uid &&
      (await deletePodByUid(clients.core, { name: serverName, namespace, uid: pod.metadata.uid }))
    )
      writes.push(`Pod ${serverName} (deleted)`);
    // The token Secret stays until the export goes (it opens nothing once the server is gone).
    if (
      plan.tearDown &&
      cache.get('Service', namespace, serverName) &&
      (await deleteUnlessGone(() => clients.core.deleteNamespacedService({ namespace, name: serverName })))
    )
      writes.push(`Service ${serverName} (deleted)`);
    const status: ExportStatus = {
      ...plan.status,
      ...(certificate && { certificate }),
      observedGeneration: vmExport.metadata.generation,
    };
    if (await writeStatusWithPhaseEvent(clients, record, EXPORT_PLURAL, vmExport, status, REASONS))
      writes.push('status');
    if (writes.length > 0) logger.info({ key, writes, phase: status.phase }, 'reconciled');
    const untilExpiry = plan.expiresAt.getTime() - at.getTime();
    return untilExpiry > 0 ? { requeueAfter: untilExpiry } : undefined;
  };
}
