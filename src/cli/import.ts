import { readFile, writeFile } from 'node:fs/promises';
import { Command, Option } from 'commander';
import { flagErrors } from './flag-errors.js';
import { repeatable } from './repeatable.js';
import { z } from 'zod';
import type { ImportOutcome } from '../api/import-progress.js';
import { DiskSource, ImageSource, type ImportSource } from '../api/virtual-machine.js';
import { ImportFailure, describeError } from '../importer/failure.js';
import { destinationGuard } from '../importer/destinations.js';
import { guardDestinations } from '../importer/http.js';
import { importDisk } from '../importer/import-disk.js';
import { startUploadServer, type UploadServer } from '../importer/upload.js';
import { redisProgress } from '../importer/progress.js';
import { WorkKeySchema } from '../queue/index.js';
import { RedisUrlSchema } from '../queue/connection.js';
import { createLogger } from '../util/logger.js';

export const EXIT_IMPORT_FAILED = 1;
export const EXIT_BAD_ARGUMENTS = 2;

const ImportOptions = z.object({
  url: z.string().optional(),
  sha256: z.string().optional(),
  caCertificate: z.string().optional(),
  image: z.string().optional(),
  insecure: z.boolean().optional(),
  pvc: z.string().optional(),
  /** Receive the image: listen on this port with the token and certificate of these files. */
  uploadPort: z.coerce.number().int().min(1).max(65535).optional(),
  tokenFile: z.string().optional(),
  tlsCert: z.string().optional(),
  tlsKey: z.string().optional(),
  sourceDevice: z.string().optional(),
  target: z.string().min(1),
  scratch: z.string().min(1),
  attempts: z.coerce.number().int().min(1),
  retryDelayMs: z.coerce.number().int().min(0),
  outcomeFile: z.string().min(1),
  /** Progress goes to Redis only with all three; otherwise it is logged. */
  redis: RedisUrlSchema.optional(),
  vmKey: WorkKeySchema.optional(),
  volume: z.string().optional(),
  podUid: z.string().default(''),
  deny: z.array(z.string()).default([]),
  allow: z.array(z.string()).default([]),
});

const kebab = (name: string) => name.replace(/[A-Z]/g, (letter) => `-${letter.toLowerCase()}`);

async function runImport(raw: unknown): Promise<number> {
  const logger = createLogger('import');
  const parsed = ImportOptions.safeParse(raw);
  if (!parsed.success) {
    for (const message of flagErrors(parsed.error)) logger.error(message);
    return EXIT_BAD_ARGUMENTS;
  }
  const options = parsed.data;
  // The same rules as a VM's disks[].source (an image's, for an upload).
  const checked = (options.uploadPort !== undefined ? ImageSource : DiskSource).safeParse({
    ...(options.url !== undefined && {
      http: { url: options.url, sha256: options.sha256, caCertificate: options.caCertificate },
    }),
    ...(options.image !== undefined && { registry: { image: options.image, insecure: options.insecure } }),
    ...(options.pvc !== undefined && { pvc: { name: options.pvc } }),
    ...(options.uploadPort !== undefined && { upload: { sha256: options.sha256 } }),
  });
  const source: { success: boolean; data?: ImportSource; error?: typeof checked.error } = checked;
  const given = [source.data?.http, source.data?.registry, source.data?.pvc, source.data?.upload].filter(
    Boolean,
  ).length;
  const sourceData = source.data;
  if (!source.success || !sourceData || given !== 1) {
    for (const issue of source.error?.issues ?? [
      { path: [], message: 'give one of --url, --image, --pvc or --upload-port' },
    ])
      logger.error(`${issue.path.join('.') || 'source'}: ${issue.message}`);
    return EXIT_BAD_ARGUMENTS;
  }
  try {
    guardDestinations(destinationGuard(options.deny, options.allow));
  } catch (err) {
    logger.error(`--deny/--allow: ${(err as Error).message}`);
    return EXIT_BAD_ARGUMENTS;
  }
  const progress =
    options.redis && options.vmKey && options.volume
      ? redisProgress({
          redisUrl: options.redis,
          vmKey: options.vmKey,
          volume: options.volume,
          podUid: options.podUid,
          logger,
        })
      : { send: (p: object) => logger.debug(p, 'progress'), close: async () => {} };
  let upload: UploadServer | undefined;
  if (sourceData.upload) {
    const files = { tokenFile: options.tokenFile, tlsCert: options.tlsCert, tlsKey: options.tlsKey };
    const missing = Object.entries(files).filter(([, file]) => file === undefined);
    if (missing.length > 0) {
      for (const [name] of missing) logger.error(`--${kebab(name)}: an upload needs it`);
      return EXIT_BAD_ARGUMENTS;
    }
    upload = await startUploadServer({
      token: (await readFile(files.tokenFile!, 'utf8')).trim(),
      tls: { cert: await readFile(files.tlsCert!, 'utf8'), key: await readFile(files.tlsKey!, 'utf8') },
      sha256: sourceData.upload.sha256,
      port: options.uploadPort!,
      logger,
    });
    logger.info({ port: upload.port }, 'waiting for the upload');
  }
  let outcome: ImportOutcome;
  try {
    const imported = await importDisk({
      ...options,
      upload,
      source: sourceData,
      scratchDir: options.scratch,
      onProgress: (p) => progress.send(p),
      logger,
    });
    logger.info(imported, 'imported');
    outcome = {
      result: 'Succeeded',
      reason: 'Imported',
      message: `imported ${imported.format} image (${imported.provenance})`,
    };
  } catch (err) {
    outcome =
      err instanceof ImportFailure
        ? { result: 'Failed', reason: err.reason, message: err.message }
        : { result: 'Failed', reason: 'ImportError', message: describeError(err) };
    logger.error(outcome, 'import failed');
  }
  await upload?.close(outcome.result === 'Succeeded' ? 'the image is imported' : outcome.message);
  await progress.close();
  // The pod's termination message: how the manager learns the outcome (kubelet keeps 4 KiB).
  await writeFile(options.outcomeFile, JSON.stringify(outcome).slice(0, 4000)).catch((err: unknown) =>
    logger.warn({ reason: describeError(err) }, 'could not write the outcome'),
  );
  return outcome.result === 'Succeeded' ? 0 : EXIT_IMPORT_FAILED;
}

export function register(program: Command): void {
  program
    .command('import')
    .description("Import a disk image from a URL onto a disk (in a VM's importer pod, or stand-alone)")
    .option('--url <url>', 'the image: raw or qcow2, plain or compressed with xz or gzip')
    .option('--sha256 <hex>', 'the SHA-256 the download must have')
    .option(
      '--ca-certificate <pem>',
      "PEM certificates an https server's must chain to (not the system's CAs)",
    )
    .option('--image <reference>', 'or: an OCI image with the disk file under /disk/')
    .option('--insecure', 'the registry speaks plain HTTP')
    .option('--pvc <name>', 'or: copy a claim (its name, for messages) from --source-device')
    .option('--source-device <path>', "that claim's block device (or a file)")
    .option('--upload-port <port>', 'or: receive the image over HTTPS on this port (vmop image upload)')
    .option('--token-file <path>', "the upload's token")
    .option('--tls-cert <path>', "the upload server's certificate (PEM)")
    .option('--tls-key <path>', 'and its key (PEM)')
    .requiredOption('--target <path>', 'the disk: a block device or a file (its size is the limit)')
    .option('--scratch <dir>', 'where a qcow2 image is kept until converted', '/tmp')
    .addOption(
      repeatable(
        '--deny <network>',
        'a network, address or address:port imports may not fetch from (besides loopback and link-local); repeatable',
      ),
    )
    .addOption(
      repeatable('--allow <network>', 'a network, address or address:port allowed even so; repeatable'),
    )
    .option('--attempts <n>', 'download attempts before failing', '5')
    .option('--retry-delay-ms <ms>', 'the first wait between attempts (it doubles)', '1000')
    .option('--outcome-file <path>', 'where the outcome goes as JSON', '/dev/termination-log')
    .addOption(new Option('--redis <url>', 'send progress to this Redis').env('VMOP_REDIS_URL'))
    .addOption(new Option('--vm-key <key>', 'the VM the disk belongs to, e.g. vm:ns/name').env('VMOP_VM_KEY'))
    .option('--volume <name>', "the disk's volume name (its progress key)")
    .addOption(new Option('--pod-uid <uid>', "the importer pod's uid").env('VMOP_POD_UID'))
    .action(async (options: Record<string, unknown>) => {
      // Exits at once: the outcome is written, and nothing a failed import left open may hold the pod.
      process.exit(await runImport(options));
    });
}
