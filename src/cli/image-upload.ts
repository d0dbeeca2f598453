// `vmop image upload FILE --name NAME`: a disk image on this machine into a VirtualMachineImage of
// the cluster. The image is made with `source.upload` (the file's SHA-256, so the importer checks
// what arrived), its importer pod is reached through the apiserver (a port-forward: the person's
// own pods/portforward, no address of the cluster's needed), and the file is sent in pieces, each
// resumed where the pod says the upload stands. Run again with the same name, it goes on from there.
import type { CoreV1Api, CustomObjectsApi, KubeConfig, V1Pod } from '@kubernetes/client-node';
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import { API_VERSION, GROUP, VERSION } from '../api/virtual-machine.js';
import {
  IMAGE_KIND,
  IMAGE_PLURAL,
  UPLOAD_PORT,
  VirtualMachineImage,
  imageImporterPodName,
  imageUploadSecretName,
  uploadServerHostname,
} from '../api/virtual-machine-image.js';
import { compressionOf, formatOf, HEAD_BYTES } from '../importer/format.js';
import { sendFile } from '../importer/upload-client.js';
import { isNotFound } from '../kube/clients.js';
import { listenForwarding } from '../kube/port-forward.js';
import { formatDuration } from '../util/table.js';
import { fail } from './failure.js';
import { phaseAndMessage, pollUntil } from './follow-status.js';

export interface UploadCliOptions {
  name: string;
  /** The image's claim size; from the file when absent (raw: its size, qcow2: its virtual size). */
  size?: string;
  storageClass?: string;
  /** Wait until the image is Ready (the default), not only until the bytes arrived. */
  wait: boolean;
  timeout: number;
}

const MiB = 1024 * 1024;

/** What the file is: its size, SHA-256 and the disk size it needs (unknown when compressed). */
async function examine(file: string): Promise<{ length: number; sha256: string; diskBytes?: number }> {
  const { size: length } = await stat(file).catch(() => fail(`${file}: no such file`));
  const head = Buffer.alloc(HEAD_BYTES);
  const handle = await open(file);
  try {
    await handle.read(head, 0, HEAD_BYTES, 0);
  } finally {
    await handle.close();
  }
  const hash = createHash('sha256');
  await pipeline(createReadStream(file, { highWaterMark: 4 * MiB }), hash);
  const sha256 = hash.digest('hex');
  if (compressionOf(head)) return { length, sha256 };
  const kind = formatOf(head);
  if ('unknown' in kind) fail(`${file} holds ${kind.unknown}: vmop imports raw and qcow2 images`);
  // qcow2: its header's virtual size (big-endian, at byte 24).
  return { length, sha256, diskBytes: kind.format === 'qcow2' ? Number(head.readBigUInt64BE(24)) : length };
}

const podReady = (pod: V1Pod | undefined) =>
  pod?.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;

export async function uploadImage(
  kubeConfig: KubeConfig,
  api: CustomObjectsApi,
  core: CoreV1Api,
  namespace: string,
  file: string,
  options: UploadCliOptions,
): Promise<void> {
  const { name } = options;
  const ref = { group: GROUP, version: VERSION, plural: IMAGE_PLURAL, namespace };
  const read = async () => VirtualMachineImage.parse(await api.getNamespacedCustomObject({ ...ref, name }));
  const facts = await examine(file);
  const existing = await read().catch((err: unknown) => (isNotFound(err) ? undefined : Promise.reject(err)));
  if (existing) {
    // The same upload again (one that broke off): it goes on.
    if (existing.spec.source.upload?.sha256 !== facts.sha256)
      fail(`virtualmachineimage/${name} exists in ${namespace}, and is not an upload of this file`);
    if (existing.status?.phase === 'Ready') return void console.error(`${name} is already Ready`);
  } else {
    const size = options.size ?? (facts.diskBytes && `${Math.ceil(facts.diskBytes / MiB)}Mi`);
    if (!size) fail(`${file} is compressed: its disk size is not known, give it with --size`);
    await api.createNamespacedCustomObject({
      ...ref,
      body: {
        apiVersion: API_VERSION,
        kind: IMAGE_KIND,
        metadata: { name },
        spec: {
          source: { upload: { sha256: facts.sha256 } },
          storage: { size, ...(options.storageClass && { storageClassName: options.storageClass }) },
        },
      },
    });
    console.error(`virtualmachineimage/${name} created in ${namespace} (${size})`);
  }
  const deadline = Date.now() + options.timeout;
  const left = () => Math.max(0, deadline - Date.now());
  // Its importer pod listens once its claim is bound and the pod runs.
  const podName = imageImporterPodName(name);
  const waiting = await pollUntil(
    name,
    read,
    (image) => image.status?.phase === 'Failed' || image.status?.upload?.certificate !== undefined,
    left(),
    { narrate: true },
  );
  if (waiting.status?.phase === 'Failed') fail(phaseAndMessage(name, waiting));
  while (!podReady(await core.readNamespacedPod({ namespace, name: podName }).catch(() => undefined))) {
    if (left() === 0) fail(`${name}: its importer pod ${podName} was not ready in time`);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  const secret = await core.readNamespacedSecret({ namespace, name: imageUploadSecretName(name) });
  const token = Buffer.from(secret.data?.token ?? '', 'base64').toString('utf8');
  const { server, port } = await listenForwarding(kubeConfig, {
    namespace,
    pod: () => podName,
    port: UPLOAD_PORT,
  });
  const started = Date.now();
  let reported = 0;
  try {
    const sent = await sendFile({
      endpoint: {
        host: '127.0.0.1',
        port,
        servername: uploadServerHostname(name, namespace),
        ca: waiting.status!.upload!.certificate,
      },
      token,
      file,
      length: facts.length,
      onProgress: (offset) => {
        const percent = Math.floor((100 * offset) / facts.length);
        if (percent >= reported + 10 || offset === facts.length) {
          reported = percent;
          console.error(`${name}: ${percent}% sent`);
        }
      },
    });
    const seconds = (Date.now() - started) / 1000;
    console.error(
      `${name}: ${sent} bytes sent in ${formatDuration(Date.now() - started)} (${(sent / MiB / Math.max(seconds, 0.001)).toFixed(1)} MiB/s), sha256 ${facts.sha256}`,
    );
  } finally {
    server.close();
  }
  if (!options.wait) return;
  const done = await pollUntil(
    name,
    read,
    (image) => image.status?.phase === 'Ready' || image.status?.phase === 'Failed',
    left(),
  );
  if (done.status?.phase !== 'Ready') fail(phaseAndMessage(name, done));
  console.log(`virtualmachineimage/${name} Ready (${done.status?.message})`);
}
