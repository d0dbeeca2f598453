// The export server (`vmop export-server`, in a VirtualMachineExport's pod): serves each disk it is
// given, read-only, as `/disks/<disk>.raw` (the device's bytes) and `/disks/<disk>.qcow2` (made once
// at the start into scratch space: sparse, only the data the guest wrote), to whoever sends the
// export's token, until the export expires, over HTTPS with the export's own certificate
// (certificate.ts). Range requests resume a broken download.
import { execFile } from 'node:child_process';
import { createHash, timingSafeEqual } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { EXPORT_TOKEN_HEADER, ExportFormat } from '../api/virtual-machine-export.js';
import type { Logger } from '../util/logger.js';

const run = promisify(execFile);

export interface ExportedDisk {
  name: string;
  /** The claim's block device (or a file). */
  device: string;
}

export interface ExportServerOptions {
  disks: ExportedDisk[];
  token: string;
  /** The server's certificate and key (PEM). */
  tls: { cert: string; key: string };
  expiresAt: Date;
  /** Where the qcow2 images are made. */
  scratchDir: string;
  port: number;
  host?: string;
  logger: Logger;
  now?: () => Date;
}

export interface ExportServer {
  /** Resolves once every disk's qcow2 image is made (the pod is Ready then). */
  ready: Promise<void>;
  port: number;
  close(): Promise<void>;
}

interface Served {
  path: string;
  size: number;
}

/** A raw disk's size: a block device's `stat` says 0, so ask qemu-img. */
async function rawSize(device: string): Promise<number> {
  const { stdout } = await run('qemu-img', ['info', '-f', 'raw', '--output=json', device]);
  return (JSON.parse(stdout) as { 'virtual-size': number })['virtual-size'];
}

async function makeQcow2(disk: ExportedDisk, scratchDir: string): Promise<Served> {
  const path = join(scratchDir, `${disk.name}.qcow2`);
  // -S 64k: runs of zeros are left out, so the image holds only what was written.
  await run('qemu-img', ['convert', '-f', 'raw', '-O', 'qcow2', '-S', '64k', disk.device, path], {
    maxBuffer: 1 << 20,
  });
  return { path, size: (await stat(path)).size };
}

const digest = (value: string) => createHash('sha256').update(value).digest();

/** `bytes=a-b`, `bytes=a-` or `bytes=-n` of a `size`-byte body; undefined: not satisfiable. */
export function parseRange(header: string, size: number): { start: number; end: number } | undefined {
  const match = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (!match || (match[1] === '' && match[2] === '')) return undefined;
  const [first, last] = [match[1]!, match[2]!];
  const start = first === '' ? Math.max(0, size - parseInt(last, 10)) : parseInt(first, 10);
  const end = first === '' || last === '' ? size - 1 : Math.min(parseInt(last, 10), size - 1);
  return start <= end && start < size ? { start, end } : undefined;
}

export function startExportServer(options: ExportServerOptions): Promise<ExportServer> {
  const { logger } = options;
  const now = options.now ?? (() => new Date());
  const expected = digest(options.token);
  const raw = new Map<string, Served>();
  const qcow2 = new Map<string, Served>();
  let failed: string | undefined;

  const ready = (async () => {
    for (const disk of options.disks) {
      raw.set(disk.name, { path: disk.device, size: await rawSize(disk.device) });
      const started = Date.now();
      const made = await makeQcow2(disk, options.scratchDir);
      qcow2.set(disk.name, made);
      logger.info({ disk: disk.name, bytes: made.size, ms: Date.now() - started }, 'qcow2 image made');
    }
  })();
  ready.catch((err: Error) => {
    failed = err.message;
    logger.error({ reason: err.message }, 'a disk cannot be served');
  });

  const authorized = (req: IncomingMessage, url: URL) => {
    const given = req.headers[EXPORT_TOKEN_HEADER] ?? url.searchParams.get('token') ?? '';
    return timingSafeEqual(digest(Array.isArray(given) ? given[0]! : given), expected);
  };

  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'https://export');
    if (url.pathname === '/healthz') {
      const ok = failed === undefined && qcow2.size === options.disks.length;
      res.writeHead(ok ? 200 : 503).end(failed ?? (ok ? 'ok' : 'making the qcow2 images'));
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') return void res.writeHead(405).end();
    if (!authorized(req, url)) return void res.writeHead(401).end('a valid export token is needed');
    if (now() >= options.expiresAt) return void res.writeHead(410).end('the export has expired');
    const match = /^\/disks\/([a-z0-9-]+)\.([a-z0-9]+)$/.exec(url.pathname);
    const format = ExportFormat.safeParse(match?.[2]);
    const disk = match?.[1];
    if (!match || !format.success || !options.disks.some((d) => d.name === disk))
      return void res
        .writeHead(404)
        .end(`no such disk; there are ${options.disks.map((d) => d.name).join(', ')}`);
    const served = (format.data === 'raw' ? raw : qcow2).get(disk!);
    if (!served) return void res.writeHead(503, { 'retry-after': '5' }).end('not ready yet');
    const headers = {
      'content-type': 'application/octet-stream',
      'content-disposition': `attachment; filename="${disk}.${format.data}"`,
      'accept-ranges': 'bytes',
    };
    const rangeHeader = req.headers.range;
    const range = rangeHeader ? parseRange(rangeHeader, served.size) : { start: 0, end: served.size - 1 };
    if (!range) {
      res.writeHead(416, { 'content-range': `bytes */${served.size}` }).end();
      return;
    }
    const length = served.size === 0 ? 0 : range.end - range.start + 1;
    res.writeHead(rangeHeader ? 206 : 200, {
      ...headers,
      'content-length': String(length),
      ...(rangeHeader && { 'content-range': `bytes ${range.start}-${range.end}/${served.size}` }),
    });
    if (req.method === 'HEAD' || length === 0) return void res.end();
    const body = createReadStream(served.path, {
      start: range.start,
      end: range.end,
      highWaterMark: 1 << 20,
    });
    body.on('error', (err) => {
      logger.warn({ disk, reason: err.message }, 'reading the disk failed');
      res.destroy(err);
    });
    res.on('close', () => body.destroy());
    body.pipe(res);
    logger.info({ disk, format: format.data, start: range.start, bytes: length }, 'download');
  };

  const server: Server = createServer({ cert: options.tls.cert, key: options.tls.key }, handle);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      resolve({
        ready,
        port: (server.address() as AddressInfo).port,
        close: () =>
          new Promise((done) => {
            server.closeAllConnections();
            server.close(() => done());
          }),
      });
    });
  });
}
