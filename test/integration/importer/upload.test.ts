// An upload into a disk: the importer's upload server (HTTPS, the image's token) feeding the same
// import as a download, with real qemu-img, writing to a file as its disk. A connection that breaks
// off mid-body loses only what was in flight, and the sender resumes where HEAD says.
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { selfSignedCertificate, type ServerCertificate } from '../../../src/export/certificate.js';
import { ImportFailure } from '../../../src/importer/failure.js';
import { importDisk } from '../../../src/importer/import-disk.js';
import {
  UPLOAD_LENGTH_HEADER,
  UPLOAD_OFFSET_HEADER,
  UPLOAD_PATH,
  UPLOAD_TOKEN_HEADER,
  startUploadServer,
  type UploadServer,
} from '../../../src/importer/upload.js';
import { createLogger } from '../../../src/util/logger.js';
import { convertRawImage } from '../../support/disk-images.js';

const MiB = 1024 * 1024;
const TOKEN = 'the-upload-token';
const HOST = 'upload.test';

interface Answer {
  status: number;
  offset: number;
  body: string;
}

describe('uploads', () => {
  let dir: string;
  let tls: ServerCertificate;
  let raw: Buffer;

  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'vmop-upload-'));
    await mkdir(path.join(dir, 'scratch'));
    tls = await selfSignedCertificate([HOST], new Date(Date.now() + 3600_000));
    // 8 MiB: random data at 1 MiB and 6 MiB, zeros elsewhere.
    raw = Buffer.alloc(8 * MiB);
    randomBytes(MiB).copy(raw, MiB);
    randomBytes(MiB + 77).copy(raw, 6 * MiB);
    await writeFile(path.join(dir, 'image.raw'), raw);
    await convertRawImage(path.join(dir, 'image.raw'), path.join(dir, 'image.qcow2'), 'qcow2');
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  /** One request to the server; `breakAfter` bytes of the body are sent before the socket is cut. */
  function send(
    server: UploadServer,
    method: 'HEAD' | 'PATCH',
    headers: Record<string, string>,
    body?: Buffer,
    breakAfter?: number,
  ): Promise<Answer> {
    return new Promise((resolve, reject) => {
      const req = request(
        {
          host: '127.0.0.1',
          port: server.port,
          servername: HOST,
          ca: tls.cert,
          method,
          path: UPLOAD_PATH,
          headers: { [UPLOAD_TOKEN_HEADER]: TOKEN, ...headers },
        },
        (res) => {
          let text = '';
          res.on('data', (chunk) => (text += String(chunk)));
          res.on('end', () =>
            resolve({
              status: res.statusCode!,
              offset: Number(res.headers[UPLOAD_OFFSET_HEADER]),
              body: text,
            }),
          );
        },
      );
      req.on('error', (err) =>
        breakAfter !== undefined ? resolve({ status: 0, offset: -1, body: '' }) : reject(err),
      );
      if (!body) return void req.end();
      if (breakAfter === undefined) return void req.end(body);
      // Half the body, then the connection goes (as a laptop's Wi-Fi would).
      req.write(body.subarray(0, breakAfter), () => setTimeout(() => req.destroy(), 300));
    });
  }

  const offsetNow = async (server: UploadServer) => (await send(server, 'HEAD', {})).offset;

  async function upload(
    file: Buffer,
    options: { sha256?: string; chunk: number; breakOnce?: boolean },
  ): Promise<{
    imported: Promise<unknown>;
    target: string;
    server: UploadServer;
    answers: Answer[];
    /** Where the cut piece started, and where HEAD said to go on. */
    resumed?: { from: number; at: number };
  }> {
    const server = await startUploadServer({
      token: TOKEN,
      tls,
      sha256: options.sha256,
      port: 0,
      host: '127.0.0.1',
      logger: createLogger('upload-test'),
    });
    const target = path.join(dir, `disk-${Math.random().toString(36).slice(2)}.img`);
    // The disk: as large as the image's content.
    await writeFile(target, Buffer.alloc(raw.length));
    const imported = importDisk({
      source: { upload: { sha256: options.sha256 } },
      upload: server,
      target,
      scratchDir: path.join(dir, 'scratch'),
      attempts: 1,
      retryDelayMs: 0,
      onProgress: () => {},
      logger: createLogger('upload-test'),
    });
    imported.catch(() => {});
    const answers: Answer[] = [];
    let broken = !options.breakOnce;
    let resumed: { from: number; at: number } | undefined;
    for (let offset = 0; offset < file.length;) {
      const piece = file.subarray(offset, offset + options.chunk);
      const headers = { [UPLOAD_OFFSET_HEADER]: String(offset), [UPLOAD_LENGTH_HEADER]: String(file.length) };
      if (!broken && offset > 0) {
        broken = true;
        await send(server, 'PATCH', headers, piece, Math.floor(piece.length / 2));
        resumed = { from: offset, at: await offsetNow(server) };
        offset = resumed.at;
        continue;
      }
      const answer = await send(server, 'PATCH', headers, piece);
      answers.push(answer);
      if (answer.status !== 204) break;
      offset = answer.offset;
    }
    return { imported, target, server, answers, resumed };
  }

  const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

  it('a raw image sent in pieces, one connection cut mid-piece: resumed where HEAD said, the disk holds it byte for byte', async () => {
    const { imported, target, server, resumed } = await upload(raw, {
      chunk: 3 * MiB,
      breakOnce: true,
      sha256: sha256(raw),
    });
    await expect(imported).resolves.toMatchObject({ format: 'raw', provenance: `sha256 ${sha256(raw)}` });
    // The half that arrived before the cut was kept: the next piece started within the cut one.
    expect(resumed!.at).toBeGreaterThan(resumed!.from);
    expect(resumed!.at).toBeLessThan(resumed!.from + 3 * MiB);
    expect((await readFile(target)).equals(raw)).toBe(true);
    await server.close();
  });

  it('a qcow2 image is converted: the disk holds its content', async () => {
    const qcow2 = await readFile(path.join(dir, 'image.qcow2'));
    const { imported, target, server } = await upload(qcow2, { chunk: 2 * MiB });
    await expect(imported).resolves.toMatchObject({ format: 'qcow2', provenance: `sha256 ${sha256(qcow2)}` });
    expect((await readFile(target)).subarray(0, raw.length).equals(raw)).toBe(true);
    await server.close();
  });

  it('another SHA-256 than the source says fails the import, saying both', async () => {
    const { imported, server } = await upload(raw, { chunk: 4 * MiB, sha256: '0'.repeat(64) });
    const failure = await imported.catch((err: unknown) => err);
    expect(failure).toBeInstanceOf(ImportFailure);
    expect(failure).toMatchObject({ reason: 'ChecksumMismatch' });
    expect((failure as Error).message).toContain(sha256(raw));
    await server.close();
  });

  it('refuses a wrong token, a wrong offset, a second length, and says where the upload stands', async () => {
    const server = await startUploadServer({
      token: TOKEN,
      tls,
      port: 0,
      host: '127.0.0.1',
      logger: createLogger('upload-test'),
    });
    expect((await send(server, 'HEAD', { [UPLOAD_TOKEN_HEADER]: 'guess' })).status).toBe(401);
    const noLength = await send(server, 'PATCH', { [UPLOAD_OFFSET_HEADER]: '0' }, Buffer.from('x'));
    expect(noLength).toMatchObject({ status: 400, body: expect.stringContaining(UPLOAD_LENGTH_HEADER) });
    // Nobody reads the data yet (no import runs): the first PATCH waits, so it is not awaited here.
    const first = send(
      server,
      'PATCH',
      { [UPLOAD_OFFSET_HEADER]: '0', [UPLOAD_LENGTH_HEADER]: '10' },
      Buffer.from('01234'),
    );
    const reader = server.data[Symbol.asyncIterator]();
    expect(String((await reader.next()).value)).toBe('01234');
    // A PATCH is answered once the import took all of its body (and asks for more).
    const readerWaits = reader.next();
    expect(await first).toMatchObject({ status: 204, offset: 5 });
    const wrongOffset = await send(server, 'PATCH', { [UPLOAD_OFFSET_HEADER]: '0' }, Buffer.from('01234'));
    expect(wrongOffset).toMatchObject({ status: 409, offset: 5, body: 'the upload continues at byte 5' });
    const otherLength = await send(
      server,
      'PATCH',
      { [UPLOAD_OFFSET_HEADER]: '5', [UPLOAD_LENGTH_HEADER]: '11' },
      Buffer.from('56789'),
    );
    expect(otherLength).toMatchObject({ status: 409, body: 'the upload is 10 bytes long, not 11' });
    const last = send(server, 'PATCH', { [UPLOAD_OFFSET_HEADER]: '5' }, Buffer.from('56789'));
    expect(String((await readerWaits).value)).toBe('56789');
    expect((await reader.next()).done).toBe(true);
    expect(await last).toMatchObject({ status: 204, offset: 10 });
    await server.close('the image is imported');
  });
});
