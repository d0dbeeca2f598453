// The reconcile of one VirtualMachineImage: its claim is made and filled by an importer pod (the
// same `vmop import` and import plan as a VM disk's), then marked imported; the image is Ready and
// VM disks naming it copy that claim. Failures are told in its status and an Event, once. An upload's
// importer pod waits for the bytes (importer/upload.ts): its token and certificate are made first,
// in a Secret of the image's, and the certificate is published in the status.
import {
  type KubernetesObject,
  type V1PersistentVolumeClaim,
  type V1Pod,
  type V1Secret,
  type V1StorageClass,
} from '@kubernetes/client-node';
import { randomBytes } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import type { ImportProgress } from '../../api/import-progress.js';
import {
  IMAGE_KIND,
  IMAGE_PLURAL,
  VirtualMachineImage,
  imageClaimName,
  imageImporterPodName,
  imageUploadSecretName,
  parseImageKey,
  uploadServerHostname,
  type ImageStatus,
} from '../../api/virtual-machine-image.js';
import {
  TLS_CERT,
  TLS_KEY,
  selfSignedCertificate,
  type ServerCertificate,
} from '../../export/certificate.js';
import { GROUP, VERSION } from '../../api/virtual-machine.js';
import { createUnlessExists, isNotFound, readableApiError, type KubeClients } from '../../kube/clients.js';
import { applyUnlessPresent } from '../../kube/server-side-apply.js';
import { statusPatch, mergePatch } from '../../kube/merge-patch.js';
import type { CachedKind, ObjectCache } from '../../kube/object-cache.js';
import type { HandlerResult } from '../../queue/index.js';
import type { TenantCredentials } from '../../api/tenant-redis.js';
import type { Logger } from '../../util/logger.js';
import { eventRecorder } from '../events.js';
import { claimWait } from '../virtual-machine/disks/claim-binding.js';
import { carryOutImports } from '../virtual-machine/disks/import-writes.js';
import { planImports, type ImportDisk } from '../virtual-machine/disks/imports.js';
import { importerPod, type ImportDestinations } from '../virtual-machine/disks/importer-pod.js';
import { runnerIdentity } from '../virtual-machine/runner-config/identity.js';
import {
  FIELD_MANAGER,
  IMPORTED_ANNOTATION,
  IMPORT_SOURCE_ANNOTATION,
  imageLabels,
  ownerReference,
  sourceDigest,
} from '../virtual-machine/naming.js';
import type { RunnerClaim } from '../virtual-machine/disks/claims.js';
import type { RunnerImage } from '../virtual-machine/runner-pod/pod.js';

/** The volume name an image's import goes by (its progress key, its pod's label). */
const VOLUME = 'image';
/** An upload server's certificate: the pod may wait long for its bytes. */
const UPLOAD_CERTIFICATE_DAYS = 365;

export interface ImageReconcilerOptions {
  clients: KubeClients;
  cache: ObjectCache;
  defaultRunnerImage: RunnerImage;
  /** Where importer pods may not fetch from, now. */
  importDestinations?: () => ImportDestinations;
  /** The importer publishes its progress with its namespace's credential (in the runner Secret). */
  redisCredentials: TenantCredentials;
  readImportProgress?: (key: string, volume: string) => Promise<ImportProgress | undefined>;
  logger: Logger;
  now?: () => Date;
}

/** The claim an image is imported into, as vmop makes it (owned by the image: it goes with it). */
function imageClaim(image: VirtualMachineImage): V1PersistentVolumeClaim {
  const { name, namespace } = image.metadata;
  const { size, storageClassName } = image.spec.storage;
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: {
      name: imageClaimName(name),
      namespace,
      labels: imageLabels(name),
      annotations: { [IMPORT_SOURCE_ANNOTATION]: sourceDigest(image.spec.source) },
      ownerReferences: [ownerReference(image)],
    },
    spec: {
      accessModes: ['ReadWriteOnce'],
      volumeMode: 'Block',
      resources: { requests: { storage: String(size) } },
      ...(storageClassName && { storageClassName }),
    },
  };
}

/** An upload's token and its server's certificate and key (owned by the image: they go with it). */
function uploadSecret(image: VirtualMachineImage, token: string, tls: ServerCertificate): V1Secret {
  const { name, namespace } = image.metadata;
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    type: 'Opaque',
    metadata: {
      name: imageUploadSecretName(name),
      namespace,
      labels: imageLabels(name),
      ownerReferences: [ownerReference(image)],
    },
    stringData: { token, [TLS_CERT]: tls.cert, [TLS_KEY]: tls.key },
  };
}

export function createImageReconciler(options: ImageReconcilerOptions) {
  const { clients, cache, logger } = options;
  const now = options.now ?? (() => new Date());
  const record = eventRecorder(clients, logger, now);

  const writeStatus = (image: VirtualMachineImage, status: ImageStatus) =>
    clients.customObjects.patchNamespacedCustomObjectStatus(
      {
        group: GROUP,
        version: VERSION,
        plural: IMAGE_PLURAL,
        namespace: image.metadata.namespace!,
        name: image.metadata.name,
        body: { status: statusPatch(image.status, status) },
      },
      mergePatch,
    );

  return async function reconcileImage(key: string): Promise<HandlerResult> {
    const { namespace, name } = parseImageKey(key);
    const raw = cache.get<KubernetesObject>(IMAGE_KIND, namespace, name);
    if (!raw || raw.metadata?.deletionTimestamp) return; // its claim and pod go with it
    const parsed = VirtualMachineImage.safeParse(raw);
    if (!parsed.success) {
      logger.warn({ key, issues: parsed.error.issues }, 'an image the CRD admitted does not parse');
      return;
    }
    const image = parsed.data;
    const desired = imageClaim(image);
    const claimName = desired.metadata!.name!;
    const existing = cache.list<V1PersistentVolumeClaim>(
      'PersistentVolumeClaim',
      namespace,
      imageLabels(name),
    );
    const pods = cache.list<V1Pod>('Pod', namespace, imageLabels(name));
    const current = existing.find((c) => c.metadata?.name === claimName);
    const claim: RunnerClaim = {
      volume: VOLUME,
      claimName,
      desired,
      exists: current !== undefined,
      block: true,
    };
    const disk: ImportDisk = { volume: VOLUME, claimName, source: image.spec.source };
    const progress = new Map<string, ImportProgress>();
    if (pods.some((pod) => pod.status?.phase !== 'Succeeded' && pod.status?.phase !== 'Failed')) {
      const sent = await options.readImportProgress?.(key, VOLUME);
      if (sent) progress.set(VOLUME, sent);
    }
    const plan = planImports({
      disks: [disk],
      claims: [claim],
      existing,
      importerPods: pods,
      progress,
      failedBefore: () => image.status?.phase === 'Failed',
      claimWait: (made) =>
        claimWait(made, true, {
          byName: (className) => cache.get<V1StorageClass>('StorageClass', '', className),
          byDefault: () => undefined, // the claim exists: the apiserver gave it its class
        }),
    });
    // The importer pod names the namespace's runner ServiceAccount and Secret: an image in a
    // namespace without VMs (none made them yet) makes them, as a VM's reconcile does.
    const writes: string[] = [];
    const wasImported = current?.metadata?.annotations?.[IMPORTED_ANNOTATION] !== undefined;
    let uploadCertificate: string | undefined;
    const secret = cache.get<V1Secret>('Secret', namespace, imageUploadSecretName(name));
    if (image.spec.source.upload && wasImported && secret) {
      // Imported: nothing takes an upload any more, and its token goes.
      await clients.core
        .deleteNamespacedSecret({ namespace, name: imageUploadSecretName(name) })
        .catch((err: unknown) => {
          if (!isNotFound(err)) throw err;
        });
      writes.push(`Secret ${imageUploadSecretName(name)} (deleted)`);
    }
    if (image.spec.source.upload && !wasImported) {
      // The token and certificate exist before the pod that mounts them; ones made earlier are kept.
      const cert = secret?.data?.[TLS_CERT];
      uploadCertificate = cert && Buffer.from(cert, 'base64').toString();
      if (!secret) {
        const at = now();
        const tls = await selfSignedCertificate(
          [uploadServerHostname(name, namespace!)],
          new Date(at.getTime() + UPLOAD_CERTIFICATE_DAYS * 86_400_000),
          at,
        );
        const body = uploadSecret(image, randomBytes(32).toString('base64url'), tls);
        if (await createUnlessExists(() => clients.core.createNamespacedSecret({ namespace, body }))) {
          writes.push(`Secret ${imageUploadSecretName(name)}`);
          uploadCertificate = tls.cert;
        }
      }
    }
    if (plan.startImports.length > 0)
      for (const object of runnerIdentity(
        namespace,
        await options.redisCredentials.forNamespace(namespace),
      )) {
        const current = cache.get<KubernetesObject>(
          object.kind as CachedKind,
          namespace,
          object.metadata!.name!,
        );
        if (await applyUnlessPresent(clients, FIELD_MANAGER, object, current))
          writes.push(`${object.kind} ${object.metadata!.name}`);
      }
    const imports = carryOutImports(clients, namespace, plan, {
      importerPod: (importing) =>
        importerPod(
          {
            podName: imageImporterPodName(name),
            namespace,
            labels: imageLabels(name),
            ownerReference: ownerReference(image),
            key,
            ...(image.spec.source.upload && { uploadSecret: imageUploadSecretName(name) }),
          },
          importing,
          options.defaultRunnerImage,
          options.importDestinations?.(),
        ),
      recordEvent: (event) =>
        record(
          { apiVersion: image.apiVersion, kind: image.kind, name, namespace, uid: image.metadata.uid! },
          { ...event, message: event.message.replace(/^disk image: /, '') },
        ),
    });
    try {
      writes.push(...(await imports));
    } catch (err) {
      // A refusal (quota, admission, a missing object) is the image's status too, not only a log line.
      const message = `cannot start the import: ${(readableApiError(err) as Error).message}`;
      if (image.status?.message !== message)
        await writeStatus(image, { ...image.status, phase: image.status?.phase ?? 'Pending', message });
      throw err;
    }

    const imported = wasImported || plan.markImported.length > 0;
    const importing = plan.statuses.get(VOLUME);
    const status: ImageStatus = {
      observedGeneration: image.metadata.generation,
      claim: claimName,
      ...(imported
        ? {
            phase: 'Ready',
            size: String(current?.status?.capacity?.storage ?? image.spec.storage.size),
            message: `imported into claim ${claimName}`,
          }
        : importing
          ? {
              phase: importing.phase === 'Failed' ? 'Failed' : 'Importing',
              ...(importing.progress && { progress: importing.progress }),
              ...(importing.importedBytes !== undefined && { importedBytes: importing.importedBytes }),
              ...(uploadCertificate &&
                importing.phase !== 'Failed' && { upload: { certificate: uploadCertificate } }),
              ...(importing.message && { message: importing.message }),
            }
          : { phase: 'Pending', message: `making claim ${claimName}` }),
    };
    if (!isDeepStrictEqual(JSON.parse(JSON.stringify(status)), image.status ?? {})) {
      await writeStatus(image, status);
      writes.push('status');
    }
    if (writes.length > 0) logger.info({ key, writes, phase: status.phase }, 'reconciled');
  };
}
