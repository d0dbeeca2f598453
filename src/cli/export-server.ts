// `vmop export-server`: the server in a VirtualMachineExport's pod (src/export/server.ts).
import { readFileSync } from 'node:fs';
import { Command } from 'commander';
import { z } from 'zod';
import { EXPORT_PORT } from '../api/virtual-machine-export.js';
import { startExportServer } from '../export/server.js';
import { createLogger } from '../util/logger.js';
import { flagErrors } from './flag-errors.js';
import { repeatable } from './repeatable.js';

const EXIT_BAD_ARGUMENTS = 2;

const ExportServerOptions = z.object({
  disk: z
    .array(z.string().regex(/^[a-z0-9-]+=\S+$/, 'NAME=DEVICE, e.g. system=/dev/vmop-export-system'))
    .min(1, 'at least one --disk'),
  tokenFile: z.string().min(1),
  tlsCert: z.string().min(1),
  tlsKey: z.string().min(1),
  expiresAt: z.iso.datetime({ message: 'an ISO 8601 time, e.g. 2026-11-30T12:00:00Z' }),
  scratch: z.string().min(1),
  port: z.coerce.number().int().min(0).max(65535),
});

export function register(program: Command): void {
  program
    .command('export-server')
    .description("Serve disks for download (in a VirtualMachineExport's pod)")
    .addOption(repeatable('--disk <name=device>', 'a disk to serve and its block device; repeatable'))
    .requiredOption('--token-file <path>', 'the file that holds the token downloads must send')
    .requiredOption('--tls-cert <path>', "the server's TLS certificate (PEM)")
    .requiredOption('--tls-key <path>', "the certificate's private key (PEM)")
    .requiredOption('--expires-at <time>', 'when the export stops serving (ISO 8601)')
    .option('--scratch <dir>', 'where the qcow2 images are made', '/scratch')
    .option('--port <port>', 'the HTTPS port', String(EXPORT_PORT))
    .action(async (raw: Record<string, unknown>) => {
      const logger = createLogger('export-server');
      const parsed = ExportServerOptions.safeParse(raw);
      if (!parsed.success) {
        for (const message of flagErrors(parsed.error)) logger.error(message);
        process.exit(EXIT_BAD_ARGUMENTS);
      }
      const options = parsed.data;
      const server = await startExportServer({
        disks: options.disk.map((spec) => {
          const [name, device] = spec.split('=', 2) as [string, string];
          return { name, device };
        }),
        token: readFileSync(options.tokenFile, 'utf8').trim(),
        tls: { cert: readFileSync(options.tlsCert, 'utf8'), key: readFileSync(options.tlsKey, 'utf8') },
        expiresAt: new Date(options.expiresAt),
        scratchDir: options.scratch,
        port: options.port,
        logger,
      });
      logger.info({ port: server.port }, 'serving');
      const stop = () => void server.close().then(() => process.exit(0));
      process.once('SIGTERM', stop);
      process.once('SIGINT', stop);
    });
}
