// The local cluster's web server for disk images (what a user's images would be on: a download
// site, an object store), so imports need no internet. It serves the files of one directory,
// the test guest's bootable disk among them. `?bytesPerSecond=N` sends slowly, so that an import
// can be caught (and killed) mid-way. Each GET is a line of its access log, as a web server's.
import { appendFileSync, createReadStream, readFileSync, writeFileSync } from 'node:fs';
import { copyFile, mkdir, stat } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';

export interface ImageServer {
  /** e.g. http://10.88.0.1:41234 — reachable from the host and from pods. */
  url: string;
  /** What it serves; files put here are served at once. */
  dir: string;
  /** The test guest's disk (qcow2), served as `test-guest.qcow2`. */
  testGuestDisk: string;
  /** One line per GET (`GET /name`), whether the download finished or not. */
  accessLog: string;
  /** How many times `name` was asked for (GET), from the access log. */
  downloads(name: string): number;
  stop(): Promise<void>;
}

/** Sends at most `bytesPerSecond`, in pieces of a tenth of a second. */
function throttle(bytesPerSecond: number): Transform {
  const piece = Math.max(1, Math.floor(bytesPerSecond / 10));
  return new Transform({
    async transform(chunk: Buffer, _encoding, done) {
      for (let offset = 0; offset < chunk.length; offset += piece) {
        this.push(chunk.subarray(offset, offset + piece));
        await sleep(100);
      }
      done();
    },
  });
}

/** How many times an image server's access log has `name` asked for. */
export function downloadsIn(accessLog: string, name: string): number {
  const log = (() => {
    try {
      return readFileSync(accessLog, 'utf8');
    } catch {
      return '';
    }
  })();
  return log.split('\n').filter((line) => line === `GET /${name}`).length;
}

export async function startImageServer(input: {
  dir: string;
  host: string;
  testGuestDir: string;
  /** Where the access log goes (outside `dir`, which it serves); default beside it. */
  accessLog?: string;
}): Promise<ImageServer> {
  await mkdir(input.dir, { recursive: true });
  const testGuestDisk = path.join(input.dir, 'test-guest.qcow2');
  await copyFile(path.join(input.testGuestDir, 'disk.qcow2'), testGuestDisk);
  const accessLog = input.accessLog ?? `${input.dir}.access.log`;
  writeFileSync(accessLog, '');
  const server: Server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://localhost');
    if (request.method === 'GET') appendFileSync(accessLog, `GET ${url.pathname}\n`);
    const file = path.join(
      input.dir,
      path.normalize(decodeURIComponent(url.pathname)).replace(/^(\.\.[/\\])+/, ''),
    );
    const rate = Number(url.searchParams.get('bytesPerSecond')) || undefined;
    stat(file)
      .then(
        async (facts) => {
          if (!facts.isFile() || !file.startsWith(input.dir)) throw new Error('not a file');
          response.writeHead(200, {
            'Content-Length': facts.size,
            'Content-Type': 'application/octet-stream',
          });
          if (request.method === 'HEAD') return response.end();
          const body = createReadStream(file);
          await (rate ? pipeline(body, throttle(rate), response) : pipeline(body, response));
        },
        () => {
          response.writeHead(404, { 'Content-Type': 'text/plain' });
          response.end('not found\n');
        },
      )
      .catch(() => response.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, input.host, resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${input.host}:${port}`,
    dir: input.dir,
    testGuestDisk,
    accessLog,
    downloads: (name) => downloadsIn(accessLog, name),
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
