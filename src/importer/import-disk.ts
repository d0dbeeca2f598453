// Imports one image into one disk: download it (retried with back-off while the network or the
// server fails), peel off xz or gzip, tell raw from qcow2, check the checksum and the size, write.
// Raw data streams onto the disk as it arrives; a qcow2 image is kept in scratch space first
// (qemu-img needs to seek in it) and converted once its checksum is known to match.
import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../util/logger.js';
import { HEAD_BYTES, compressionOf, formatOf, type Compression, type ImageFormat } from './format.js';
import { ImportFailure, RetryableDownload, describeError } from './failure.js';
import { checkQcow2, convertQcow2 } from './qcow2.js';
import { decompress, peek, type Bytes } from './streams.js';
import { prepareTarget, writeRaw } from './target.js';

export interface ImportRequest {
  url: string;
  sha256?: string;
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
  sha256: string;
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
          `could not download ${request.url} (${attempt} attempts): ${err.message}`,
        );
      const waitMs = request.retryDelayMs * 2 ** (attempt - 1);
      request.logger.warn({ attempt, waitMs, reason: err.message }, 'download failed; trying again');
      await sleep(waitMs);
    }
  }
}

async function importOnce(request: ImportRequest, attempt: number): Promise<Imported> {
  const { url } = request;
  const response = await fetch(url, { redirect: 'follow' }).catch((err: unknown) => {
    throw new RetryableDownload('Unreachable', describeError(err));
  });
  if (!response.ok || !response.body) {
    const status = `HTTP ${response.status} ${response.statusText}`.trim();
    if (response.status >= 500 || response.status === 429) throw new RetryableDownload('HttpError', status);
    throw new ImportFailure('HttpError', `${url} answered ${status}`);
  }
  const total = Number(response.headers.get('content-length')) || undefined;
  const hash = createHash('sha256');
  let bytes = 0;
  /** The share of the whole import the download is (a qcow2 image is converted after it); known once the format is. */
  let downloadShare: number | undefined;
  const report = (percent?: number) => request.onProgress({ bytes, attempt, percent });
  const body = Readable.fromWeb(response.body as never);
  async function* downloaded(): Bytes {
    try {
      for await (const chunk of body) {
        hash.update(chunk as Buffer);
        bytes += (chunk as Buffer).length;
        report(total && downloadShare ? (downloadShare * bytes) / total : undefined);
        yield chunk as Buffer;
      }
    } catch (err) {
      throw new RetryableDownload(
        'Unreachable',
        `the download broke off after ${bytes} bytes: ${describeError(err)}`,
      );
    }
  }
  const verify = () => {
    const sha256 = hash.digest('hex');
    if (request.sha256 && sha256 !== request.sha256)
      throw new ImportFailure(
        'ChecksumMismatch',
        `the SHA-256 of ${url} is ${sha256}, the disk's source says ${request.sha256}`,
      );
    return sha256;
  };

  try {
    const outer = await peek(downloaded(), HEAD_BYTES);
    if (outer.head.length === 0) throw new ImportFailure('UnknownFormat', `${url} is empty`);
    const compression = compressionOf(outer.head);
    const inner = await peek(compression ? decompress(compression, outer.all) : outer.all, HEAD_BYTES);
    const kind = formatOf(inner.head);
    if ('unknown' in kind)
      throw new ImportFailure(
        'UnknownFormat',
        `${url} holds ${kind.unknown}, not a disk image vmop imports (raw or qcow2, either one plain or compressed with xz or gzip)`,
      );
    const target = await prepareTarget(request.target);
    downloadShare = kind.format === 'raw' ? 100 : 50;
    if (kind.format === 'raw') {
      await writeRaw(inner.all, target);
      const sha256 = verify();
      report(100);
      return { format: 'raw', ...(compression && { compression }), downloadedBytes: bytes, sha256 };
    }
    const scratch = path.join(request.scratchDir, 'image.qcow2');
    try {
      await pipeline(Readable.from(inner.all), createWriteStream(scratch));
      const sha256 = verify();
      await checkQcow2(scratch, target);
      await convertQcow2(scratch, target, (percent) => report(50 + percent / 2));
      report(100);
      return { format: 'qcow2', ...(compression && { compression }), downloadedBytes: bytes, sha256 };
    } finally {
      await rm(scratch, { force: true });
    }
  } finally {
    body.destroy();
  }
}
