// An image's bytes sent by a person (`vmop image upload`, the GUI's Images page) instead of fetched:
// the importer pod of an image whose source is `upload` listens over HTTPS (the image's own
// certificate) for whoever holds the image's upload token, and feeds what arrives, in order, into
// the same import as a download (so raw data streams onto the claim, a qcow2 image is converted,
// xz and gzip are peeled off). Resumable as tus's core protocol: HEAD says how many bytes arrived,
// a PATCH carries the next ones from that offset, so a broken connection loses nothing but the
// bytes in flight. A restarted pod starts from zero: what it had was never written whole.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Logger } from '../util/logger.js';
import { ImportFailure } from './failure.js';
import type { Bytes } from './streams.js';

export const UPLOAD_PATH = '/upload';
export const UPLOAD_TOKEN_HEADER = 'x-vmop-upload-token';
export const UPLOAD_OFFSET_HEADER = 'upload-offset';
export const UPLOAD_LENGTH_HEADER = 'upload-length';

export interface UploadServerOptions {
  token: string;
  tls: { cert: string; key: string };
  /** The SHA-256 the whole upload must have; checked once it is all there. */
  sha256?: string;
  port: number;
  host?: string;
  logger: Logger;
}

export interface UploadServer {
  /** What arrives, in order, until the declared length is reached. */
  data: Bytes;
  /** Checks the SHA-256 (once all arrived) and says it. */
  provenance(): string;
  /** How many bytes were declared (known from the first PATCH). */
  length(): number | undefined;
  /** Stops taking bytes; a PATCH after it is told why (the import's failure). */
  close(reason?: string): Promise<void>;
  port: number;
}

const digest = (value: string) => createHash('sha256').update(value).digest();
const header = (req: IncomingMessage, name: string) => {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
};
const count = (value: string | undefined) =>
  value !== undefined && /^\d{1,15}$/.test(value) ? Number(value) : undefined;

export function startUploadServer(options: UploadServerOptions): Promise<UploadServer> {
  const { logger } = options;
  const expected = digest(options.token);
  const hash = createHash('sha256');
  let offset = 0;
  let length: number | undefined;
  let closed: string | undefined;
  /** The PATCH whose body is being read, and the one the reader waits for. */
  let active: IncomingMessage | undefined;
  let wanted: ((req: IncomingMessage) => void) | undefined;
  const queued: IncomingMessage[] = [];
  /** Each PATCH is answered once its body was taken (or broke off): its callback, by request. */
  const finished = new Map<IncomingMessage, () => void>();

  const next = () =>
    new Promise<IncomingMessage>((resolve) => {
      const ready = queued.shift();
      if (ready) resolve(ready);
      else wanted = resolve;
    });

  async function* data(): Bytes {
    while (length === undefined || offset < length) {
      const req = await next();
      active = req;
      try {
        for await (const chunk of req as AsyncIterable<Buffer>) {
          // Read to its end (leaving the loop early would close the connection before the answer):
          // bytes past the declared length are dropped.
          const room = length! - offset;
          if (room <= 0) continue;
          const taken = chunk.length > room ? chunk.subarray(0, room) : chunk;
          offset += taken.length;
          hash.update(taken);
          yield taken;
        }
      } catch (err) {
        // The sender went away mid-body: what arrived counts, the next PATCH continues from there.
        logger.warn({ offset, reason: (err as Error).message }, 'an upload request broke off');
      } finally {
        active = undefined;
        finished.get(req)?.();
      }
    }
    logger.info({ bytes: offset }, 'upload complete');
  }

  const authorized = (req: IncomingMessage) =>
    timingSafeEqual(digest(header(req, UPLOAD_TOKEN_HEADER) ?? ''), expected);

  const state = (res: ServerResponse, status: number, body = '') =>
    res
      .writeHead(status, {
        [UPLOAD_OFFSET_HEADER]: String(offset),
        ...(length !== undefined && { [UPLOAD_LENGTH_HEADER]: String(length) }),
        'cache-control': 'no-store',
      })
      .end(body);

  const patch = (req: IncomingMessage, res: ServerResponse) => {
    if (closed) return state(res, 410, closed);
    const from = count(header(req, UPLOAD_OFFSET_HEADER));
    const declared = count(header(req, UPLOAD_LENGTH_HEADER));
    if (from === undefined) return state(res, 400, `a PATCH needs ${UPLOAD_OFFSET_HEADER}`);
    if (length === undefined && declared === undefined)
      return state(res, 400, `the first PATCH needs ${UPLOAD_LENGTH_HEADER}: the file's size in bytes`);
    if (length !== undefined && declared !== undefined && declared !== length)
      return state(res, 409, `the upload is ${length} bytes long, not ${declared}`);
    if (active || queued.length > 0) return state(res, 409, 'another PATCH is under way');
    if (from !== offset) return state(res, 409, `the upload continues at byte ${offset}`);
    length ??= declared;
    if (offset >= length!) return state(res, 204);
    finished.set(req, () => {
      finished.delete(req);
      if (!res.headersSent) state(res, closed ? 410 : 204, closed ?? '');
    });
    // A body longer than what remains: the rest is not read (the answer says where it ended).
    req.once('close', () => finished.get(req)?.());
    if (wanted) {
      const resolve = wanted;
      wanted = undefined;
      resolve(req);
    } else queued.push(req);
  };

  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const path = new URL(req.url ?? '/', 'https://upload').pathname;
    if (path === '/healthz') return void res.writeHead(closed ? 503 : 200).end(closed ?? 'ok');
    if (path !== UPLOAD_PATH) return void res.writeHead(404).end(`uploads go to ${UPLOAD_PATH}`);
    if (!authorized(req)) return void res.writeHead(401).end('a valid upload token is needed');
    if (req.method === 'HEAD' || req.method === 'GET') return state(res, 200);
    if (req.method === 'PATCH') return patch(req, res);
    res.writeHead(405, { allow: 'HEAD, GET, PATCH' }).end();
  };

  const server: Server = createServer({ cert: options.tls.cert, key: options.tls.key }, handle);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      resolve({
        data: data(),
        length: () => length,
        provenance() {
          const sha256 = hash.digest('hex');
          if (options.sha256 && sha256 !== options.sha256)
            throw new ImportFailure(
              'ChecksumMismatch',
              `the SHA-256 of the upload is ${sha256}, the image's source says ${options.sha256}`,
            );
          return `sha256 ${sha256}`;
        },
        port: (server.address() as AddressInfo).port,
        close: (reason) =>
          new Promise((done) => {
            closed = reason ?? 'the upload is closed';
            for (const req of [...queued, ...(active ? [active] : [])]) finished.get(req)?.();
            server.closeAllConnections();
            server.close(() => done());
          }),
      });
    });
  });
}
