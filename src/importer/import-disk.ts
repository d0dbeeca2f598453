// Imports one image into one disk: download it from a URL or a registry (retried with back-off
// while the network or the server fails), or receive it (upload.ts), peel off xz or gzip, tell raw from qcow2, check the
// checksum and the size, write.
// Raw data streams onto the disk as it arrives; a qcow2 image is kept in scratch space first
// (qemu-img needs to seek in it) and converted once its checksum is known to match.
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { cp, readdir, rm, stat, truncate, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { DiskSource, ImportSource } from '../api/virtual-machine.js';
import { sourceName } from '../api/import-progress.js';
import type { Logger } from '../util/logger.js';
import { HEAD_BYTES, compressionOf, formatOf, type Compression, type ImageFormat } from './format.js';
import { ImportFailure, RetryableDownload } from './failure.js';
import { bodyBytes, expectOk, httpGet } from './http.js';
import { openRegistryImage } from './registry.js';
import { checkQcow2, convertQcow2 } from './qcow2.js';
import { decompress, peek, type Bytes } from './streams.js';
import type { UploadServer } from './upload.js';
import { prepareTarget, sizeOf, writeRaw } from './target.js';

export interface ImportRequest {
  source: ImportSource;
  /** For an `upload` source: the server that receives it. */
  upload?: UploadServer;
  /** For a `pvc` source: where its claim is (a block device in the pod, or a file). */
  sourceDevice?: string;
  /** The disk: a block device (in a pod) or a file. */
  target: string;
  /** Where a qcow2 image is kept until it is converted. */
  scratchDir: string;
  /** Download attempts before the import fails; the waits between them double from retryDelayMs. */
  attempts: number;
  retryDelayMs: number;
  onProgress: (progress: { bytes: number; percent?: number; attempt: number }) => void;
  logger: Logger;
}

export interface Imported {
  format: ImageFormat;
  compression?: Compression;
  downloadedBytes: number;
  /** Where the image came from, as checked: its sha256, the registry layer's digest, the copied claim. */
  provenance: string;
}

export async function importDisk(request: ImportRequest): Promise<Imported> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await importOnce(request, attempt);
    } catch (err) {
      if (!(err instanceof RetryableDownload)) throw err;
      if (attempt >= request.attempts)
        throw new ImportFailure(
          err.reason,
          `could not download ${sourceName(request.source)} (${attempt} attempts): ${err.message}`,
        );
      const waitMs = request.retryDelayMs * 2 ** (attempt - 1);
      request.logger.warn({ attempt, waitMs, reason: err.message }, 'download failed; trying again');
      await sleep(waitMs);
    }
  }
}

interface OpenedImage {
  data: Bytes;
  /** Checks what was read (once it was read whole) and says where it came from. */
  provenance(): string;
}

/**
 * The image file's bytes from an http(s) URL, checked against its sha256 when the source gives one
 * (hashing costs about as much CPU as receiving: it is done only when asked for).
 */
async function openHttp(http: NonNullable<DiskSource['http']>, onBytes: OnBytes): Promise<OpenedImage> {
  const response = expectOk(await httpGet(http.url, {}, { ca: http.caCertificate }), http.url);
  const total = Number(response.headers.get('content-length')) || undefined;
  const hash = http.sha256 ? createHash('sha256') : undefined;
  let bytes = 0;
  const data = bodyBytes(response, (chunk) => {
    hash?.update(chunk);
    bytes += chunk.length;
    onBytes(bytes, total);
  });
  return {
    data,
    provenance() {
      if (!hash) return 'no sha256 given to check';
      const sha256 = hash.digest('hex');
      if (sha256 !== http.sha256)
        throw new ImportFailure(
          'ChecksumMismatch',
          `the SHA-256 of ${http.url} is ${sha256}, the disk's source says ${http.sha256}`,
        );
      return `sha256 ${sha256}`;
    },
  };
}

type OnBytes = (bytes: number, total?: number) => void;

/** What a person sends, as it arrives (the server checks the SHA-256 at the end). */
function openUpload(upload: UploadServer | undefined, onBytes: OnBytes): OpenedImage {
  if (!upload) throw new ImportFailure('ImportError', 'an upload needs its server (--upload-port)');
  let bytes = 0;
  async function* data(): Bytes {
    for await (const chunk of upload!.data) {
      bytes += chunk.length;
      onBytes(bytes, upload!.length());
      yield chunk;
    }
  }
  return { data: data(), provenance: () => upload.provenance() };
}

/** Another disk's whole content (a claim's block device), read in large pieces. */
async function openDevice(device: string | undefined, name: string, onBytes: OnBytes): Promise<OpenedImage> {
  if (!device) throw new ImportFailure('ImportError', `copying ${name} needs its device (--source-device)`);
  const size = await sizeOf(device);
  let bytes = 0;
  async function* data(): Bytes {
    for await (const chunk of createReadStream(device!, { highWaterMark: 4 * 1024 * 1024 })) {
      bytes += (chunk as Buffer).length;
      onBytes(bytes, size);
      yield chunk as Buffer;
    }
  }
  return { data: data(), provenance: () => `a copy of ${name}` };
}

const isDirectory = (file: string) =>
  stat(file).then(
    (facts) => facts.isDirectory(),
    () => false,
  );

/** A claim mounted as a file system (a runner's data): its files, with their modes and times. */
async function copyFiles(source: string | undefined, target: string, name: string): Promise<void> {
  if (!source || !(await isDirectory(source)))
    throw new ImportFailure(
      'ImportError',
      `copying the files of ${name} needs its directory (--source-device)`,
    );
  // A copy is the source exactly: what the target held before goes (a restore's target has files).
  for (const entry of await readdir(target))
    if (entry !== 'lost+found') await rm(path.join(target, entry), { recursive: true, force: true });
  await cp(source, target, {
    recursive: true,
    preserveTimestamps: true,
    force: true,
    // The file system's own (root's, 0700): not the VM's.
    filter: (file) => path.basename(file) !== 'lost+found',
  });
}

async function importOnce(request: ImportRequest, attempt: number): Promise<Imported> {
  const { source } = request;
  const name = sourceName(source);
  let downloaded = 0;
  /** The share of the whole import the download is (a qcow2 image is converted after it); known once the format is. */
  let downloadShare: number | undefined;
  const report = (percent?: number) => request.onProgress({ bytes: downloaded, attempt, percent });
  const onBytes: OnBytes = (bytes, total) => {
    downloaded = bytes;
    report(total && downloadShare ? (downloadShare * downloaded) / total : undefined);
  };
  if (source.pvc) {
    // A claim is copied as it is: what a disk holds is the guest's, not an image to unpack (a disk
    // whose first bytes look like gzip or qcow2 stays so), and a runner data claim's files as files.
    if (await isDirectory(request.target)) {
      await copyFiles(request.sourceDevice, request.target, name);
      report(100);
      return { format: 'raw', downloadedBytes: 0, provenance: `a copy of the files of ${name}` };
    }
    const copy = await openDevice(request.sourceDevice, name, onBytes);
    downloadShare = 100;
    await writeRaw(copy.data, await prepareTarget(request.target));
    report(100);
    return { format: 'raw', downloadedBytes: downloaded, provenance: copy.provenance() };
  }
  const image = source.upload
    ? openUpload(request.upload, onBytes)
    : source.http
      ? await openHttp(source.http, onBytes)
      : await openRegistryImage(source.registry!.image, source.registry!.insecure ?? false, onBytes);
  const outer = await peek(image.data, HEAD_BYTES);
  try {
    if (outer.head.length === 0) throw new ImportFailure('UnknownFormat', `${name} is empty`);
    const compression = compressionOf(outer.head);
    const inner = await peek(compression ? decompress(compression, outer.all) : outer.all, HEAD_BYTES);
    const kind = formatOf(inner.head);
    if ('unknown' in kind)
      throw new ImportFailure(
        'UnknownFormat',
        `${name} holds ${kind.unknown}, not a disk image vmop imports (raw or qcow2, either one plain or compressed with xz or gzip)`,
      );
    const target = await prepareTarget(request.target);
    downloadShare = kind.format === 'raw' ? 100 : 50;
    const imported = (format: ImageFormat, provenance: string): Imported => {
      report(100);
      return { format, ...(compression && { compression }), downloadedBytes: downloaded, provenance };
    };
    if (kind.format === 'raw') {
      await writeRaw(inner.all, target);
      return imported('raw', image.provenance());
    }
    const scratch = path.join(request.scratchDir, 'image.qcow2');
    try {
      // Written as a disk is (large writes, zero runs skipped): a plain write stream takes twice as long.
      await writeFile(scratch, '');
      await truncate(scratch, await writeRaw(inner.all, { path: scratch, size: Infinity, zeroed: true }));
      const provenance = image.provenance();
      await checkQcow2(scratch, target);
      await convertQcow2(scratch, target, (percent) => report(50 + percent / 2));
      return imported('qcow2', provenance);
    } finally {
      await rm(scratch, { force: true });
    }
  } finally {
    // Whatever was not read (a failure before the end) is not fetched further.
    await outer.all.return?.(undefined);
  }
}
