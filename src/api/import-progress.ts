// What a disk importer pod tells the manager: its progress while it runs (in Redis, under the
// runner credential's key space) and its outcome when it ends (the pod's termination message).
import { z } from 'zod';
import { snapshotRedisKey } from './runner-snapshot.js';
import type { ImportSource } from './virtual-machine.js';

export const ImportProgress = z.object({
  /** Bytes downloaded so far (as sent, before decompression). */
  bytes: z.number().int().min(0),
  /** 0–100 over the whole import; absent while the size of the download is unknown. */
  percent: z.number().min(0).max(100).optional(),
  /** The download attempt (a network failure is retried). */
  attempt: z.number().int().min(1),
  /** The importer pod's uid: progress of an earlier pod does not count. */
  podUid: z.string(),
});
export type ImportProgress = z.infer<typeof ImportProgress>;

/** Why an import failed for good; the message says it for people. */
export const IMPORT_FAILURES = [
  'Unreachable',
  'HttpError',
  'ChecksumMismatch',
  'TooLarge',
  'UnknownFormat',
  'CorruptImage',
  'UnsafeImage',
  /** A destination the cluster's admin has not allowed (the cluster's own endpoints, link-local). */
  'Forbidden',
  /** A registry image without a file under /disk/. */
  'NoDisk',
  /** Anything else that went wrong (an I/O error of the disk, say). */
  'ImportError',
] as const;

export const ImportOutcome = z.object({
  result: z.enum(['Succeeded', 'Failed']),
  reason: z.enum([...IMPORT_FAILURES, 'Imported']),
  message: z.string(),
});
export type ImportOutcome = z.infer<typeof ImportOutcome>;

/** A disk's source as people name it in messages. */
export const sourceName = (source: ImportSource) =>
  source.upload
    ? 'an upload'
    : source.http
      ? source.http.url
      : source.registry
        ? `registry image ${source.registry.image}`
        : source.image
          ? `image ${source.image.name}`
          : `claim ${source.pvc!.name}`;

/** Where a disk's import progress is kept: beside the VM's snapshot, which a runner may write. */
export const importProgressRedisKey = (vmKey: string, volume: string) =>
  snapshotRedisKey(vmKey, `#import/${volume}`);
