// The importer against a real HTTP server, real qemu-img and xz, writing to a file as its disk:
// every format it takes arrives byte for byte (and sparse), every bad source is refused with its
// message, and a server that fails for a while is tried again.
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { selfSignedCertificate } from '../../../src/export/certificate.js';
import { importDisk } from '../../../src/importer/import-disk.js';
import { ImportFailure } from '../../../src/importer/failure.js';
import { createLogger } from '../../../src/util/logger.js';
import { convertRawImage } from '../../support/disk-images.js';

const run = promisify(execFile);
const MiB = 1024 * 1024;

describe('importDisk', () => {
  let dir: string;
  let server: Server;
  let base: string;
  /** Answers 503 this many more times before serving files. */
  let failuresLeft = 0;
  let requests = 0;
  let raw: Buffer;

  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'vmop-import-'));
    await mkdir(path.join(dir, 'scratch'));
    // 24 MiB: random data at 4 MiB and 20 MiB, zeros elsewhere (a sparse disk is expected).
    raw = Buffer.alloc(24 * MiB);
    randomBytes(MiB).copy(raw, 4 * MiB);
    randomBytes(MiB + 123).copy(raw, 20 * MiB);
    await writeFile(path.join(dir, 'image.raw'), raw);
    await writeFile(path.join(dir, 'image.raw.gz'), gzipSync(raw));
    const file = (name: string) => path.join(dir, name);
    await run('xz', ['-T1', '-1', '-k', file('image.raw')]);
    await convertRawImage(file('image.raw'), file('image.qcow2'), 'qcow2');
    await convertRawImage(file('image.raw'), file('image.vmdk'), 'vmdk');
    await run('xz', ['-T1', '-1', '-k', file('image.qcow2')]);
    // A qcow2 overlay naming its backing file: the importer must not read that file.
    await run('qemu-img', [
      'create',
      ...['-f', 'qcow2', '-F', 'qcow2'],
      '-b',
      file('image.qcow2'),
      file('overlay.qcow2'),
    ]);
    await writeFile(path.join(dir, 'page.html'), '<!DOCTYPE html><html></html>');
    await writeFile(
      path.join(dir, 'broken.xz'),
      Buffer.concat([(await readFile(path.join(dir, 'image.raw.xz'))).subarray(0, 4096)]),
    );
    server = createServer((request, response) => {
      requests++;
      if (failuresLeft > 0) {
        failuresLeft--;
        response.writeHead(503).end('busy');
        return;
      }
      readFile(path.join(dir, path.basename(request.url ?? ''))).then(
        (body) => response.writeHead(200, { 'Content-Length': body.length }).end(body),
        () => response.writeHead(404).end('not found'),
      );
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const sha256Of = async (file: string) =>
    createHash('sha256')
      .update(await readFile(path.join(dir, file)))
      .digest('hex');
  /** Imports `file` into a fresh disk file of `size` bytes (filled with 0xff, which must not survive). */
  async function importInto(file: string, size = 32 * MiB, sha256?: string) {
    const target = path.join(dir, `disk-${file}-${size}`);
    await writeFile(target, Buffer.alloc(size, 0xff));
    const progress: number[] = [];
    const result = await importDisk({
      source: { http: { url: `${base}/${file}`, sha256 } },
      target,
      scratchDir: path.join(dir, 'scratch'),
      attempts: 3,
      retryDelayMs: 10,
      onProgress: (p) => p.percent !== undefined && progress.push(p.percent),
      logger: createLogger('test', { level: 'silent' }),
    });
    return { result, target, progress };
  }
  const failure = (promise: Promise<unknown>) =>
    promise.then(
      () => expect.fail('the import succeeded'),
      (err: unknown) => {
        expect(err).toBeInstanceOf(ImportFailure);
        return { reason: (err as ImportFailure).reason, message: (err as ImportFailure).message };
      },
    );

  it.each([
    ['image.raw', 'raw', undefined],
    ['image.raw.gz', 'raw', 'gzip'],
    ['image.raw.xz', 'raw', 'xz'],
    ['image.qcow2', 'qcow2', undefined],
    ['image.qcow2.xz', 'qcow2', 'xz'],
  ])('%s arrives byte for byte, zeros after it, sparse', async (file, format, compression) => {
    const { result, target, progress } = await importInto(file, 32 * MiB, await sha256Of(file));
    expect(result).toMatchObject({ format, ...(compression ? { compression } : {}) });
    const disk = await readFile(target);
    expect(disk.subarray(0, raw.length).equals(raw)).toBe(true);
    expect(disk.subarray(raw.length).equals(Buffer.alloc(8 * MiB))).toBe(true);
    // 2 MiB of data (+ file system blocks): the 30 MiB of zeros were not written.
    expect((await stat(target)).blocks * 512).toBeLessThan(4 * MiB);
    expect(progress.at(-1)).toBe(100);
    expect(progress).toEqual([...progress].sort((a, b) => a - b));
  });

  it('refuses each bad source with its message', async () => {
    const wrong = 'f'.repeat(64);
    expect(await failure(importInto('image.raw', 32 * MiB, wrong))).toEqual({
      reason: 'ChecksumMismatch',
      message: `the SHA-256 of ${base}/image.raw is ${await sha256Of('image.raw')}, the disk's source says ${wrong}`,
    });
    expect(await failure(importInto('image.raw.xz', 16 * MiB))).toEqual({
      reason: 'TooLarge',
      message: `the image is larger than the disk: more than the ${16 * MiB} bytes its claim holds`,
    });
    expect(await failure(importInto('image.qcow2', 16 * MiB))).toEqual({
      reason: 'TooLarge',
      message: `the image is larger than the disk: its virtual size is ${24 * MiB} bytes, its claim holds ${16 * MiB}`,
    });
    expect(await failure(importInto('page.html'))).toMatchObject({
      reason: 'UnknownFormat',
      message: expect.stringContaining('holds an HTML page'),
    });
    expect(await failure(importInto('image.vmdk'))).toMatchObject({
      reason: 'UnknownFormat',
      message: expect.stringContaining('holds a VMDK image'),
    });
    expect(await failure(importInto('overlay.qcow2'))).toMatchObject({
      reason: 'UnsafeImage',
      message: expect.stringContaining('the qcow2 image refers to another file'),
    });
    expect(await failure(importInto('broken.xz'))).toMatchObject({
      reason: 'CorruptImage',
      message: expect.stringContaining('the xz data is broken'),
    });
    expect(await failure(importInto('missing.raw'))).toEqual({
      reason: 'HttpError',
      message: `${base}/missing.raw answered HTTP 404 Not Found`,
    });
  });

  it('copies another disk (a device or file): zeros past the end of the target are left out, data there is refused', async () => {
    const target = path.join(dir, 'copy-target');
    await writeFile(target, Buffer.alloc(24 * MiB, 0xff));
    const copy = (sourceDevice: string) =>
      importDisk({
        source: { pvc: { name: 'golden' } },
        sourceDevice,
        target,
        scratchDir: path.join(dir, 'scratch'),
        attempts: 1,
        retryDelayMs: 0,
        onProgress: () => {},
        logger: createLogger('test', { level: 'silent' }),
      });
    const bigger = path.join(dir, 'golden-40m');
    await writeFile(bigger, Buffer.concat([raw, Buffer.alloc(16 * MiB)]));
    expect(await copy(bigger)).toMatchObject({ format: 'raw', provenance: 'a copy of claim golden' });
    expect((await readFile(target)).equals(raw)).toBe(true);
    await writeFile(bigger, Buffer.concat([raw, Buffer.alloc(MiB), Buffer.from('data past the end')]));
    expect(await failure(copy(bigger))).toEqual({
      reason: 'TooLarge',
      message: `the image is larger than the disk: more than the ${24 * MiB} bytes its claim holds`,
    });
  });

  it('copies a claim as it is: a disk holding gzip data stays gzip data, a file system is copied file by file', async () => {
    const copy = (sourceDevice: string, target: string) =>
      importDisk({
        source: { pvc: { name: 'vm1-disk' } },
        sourceDevice,
        target,
        scratchDir: path.join(dir, 'scratch'),
        attempts: 1,
        retryDelayMs: 0,
        onProgress: () => {},
        logger: createLogger('test', { level: 'silent' }),
      });
    // A guest that wrote a gzip stream onto its whole disk: unpacking it would not be a copy.
    const gzipDisk = path.join(dir, 'gzip-disk');
    const content = Buffer.alloc(4 * MiB);
    gzipSync(randomBytes(MiB)).copy(content);
    await writeFile(gzipDisk, content);
    const target = path.join(dir, 'gzip-copy');
    await writeFile(target, Buffer.alloc(4 * MiB));
    await copy(gzipDisk, target);
    expect((await readFile(target)).equals(content)).toBe(true);

    // A runner's data claim: its files (the TPM state is 0600), not the file system's lost+found.
    const data = path.join(dir, 'runner-data');
    await mkdir(path.join(data, 'tpm'), { recursive: true });
    await mkdir(path.join(data, 'lost+found'));
    await writeFile(path.join(data, 'tpm', 'tpm2-00.permall'), 'tpm state', { mode: 0o600 });
    await writeFile(path.join(data, 'fw-vars.fd'), 'variables');
    const copied = path.join(dir, 'runner-data-copy');
    await mkdir(copied);
    await writeFile(path.join(copied, 'written-later'), 'not in the source'); // a restore's target
    expect(await copy(data, copied)).toMatchObject({ provenance: 'a copy of the files of claim vm1-disk' });
    expect(await readFile(path.join(copied, 'tpm', 'tpm2-00.permall'), 'utf8')).toBe('tpm state');
    expect((await stat(path.join(copied, 'tpm', 'tpm2-00.permall'))).mode & 0o777).toBe(0o600);
    expect(await readFile(path.join(copied, 'fw-vars.fd'), 'utf8')).toBe('variables');
    await expect(stat(path.join(copied, 'lost+found'))).rejects.toThrow('ENOENT');
    await expect(stat(path.join(copied, 'written-later'))).rejects.toThrow('ENOENT');
  });

  it('tries a failing server again with back-off, and gives up after the last attempt', async () => {
    failuresLeft = 2;
    requests = 0;
    const { target } = await importInto('image.raw');
    expect(requests).toBe(3);
    expect((await readFile(target)).subarray(0, raw.length).equals(raw)).toBe(true);
    failuresLeft = 3;
    expect(await failure(importInto('image.raw'))).toEqual({
      reason: 'HttpError',
      message: `could not download ${base}/image.raw (3 attempts): HTTP 503 Service Unavailable`,
    });
    failuresLeft = 0;
    await truncate(path.join(dir, 'image.raw'), raw.length);
  });

  it('downloads over HTTPS from a server whose certificate the source names (caCertificate), and only then', async () => {
    const tls = await selfSignedCertificate(['localhost'], new Date(Date.now() + 3_600_000));
    const httpsServer = createHttpsServer(tls, (_request, response) =>
      response.writeHead(200, { 'Content-Length': raw.length }).end(raw),
    );
    await new Promise<void>((resolve) => httpsServer.listen(0, '127.0.0.1', resolve));
    const url = `https://localhost:${(httpsServer.address() as AddressInfo).port}/image.raw`;
    const importFrom = (http: { url: string; caCertificate?: string }) =>
      importDisk({
        source: { http },
        target: path.join(dir, 'disk-https'),
        scratchDir: path.join(dir, 'scratch'),
        attempts: 1,
        retryDelayMs: 10,
        onProgress: () => undefined,
        logger: createLogger('test', { level: 'silent' }),
      });
    try {
      await writeFile(path.join(dir, 'disk-https'), Buffer.alloc(raw.length));
      await importFrom({ url, caCertificate: tls.cert });
      expect((await readFile(path.join(dir, 'disk-https'))).equals(raw)).toBe(true);
      // The system's CAs do not know it: refused, saying why.
      const refused = await failure(importFrom({ url }));
      expect(refused.message).toMatch(/self[- ]signed certificate/);
    } finally {
      httpsServer.close();
    }
  });
});
