// The export server against a disk file with real qemu-img: what a download gets, whom it refuses,
// that a qcow2 download is sparse and holds the same disk, and that it speaks HTTPS with the
// export's certificate (trusted as the export's status.certificate, by the Service's name).
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, open, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Agent, fetch as undiciFetch } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exportServerHostnames } from '../../../src/api/virtual-machine-export.js';
import { selfSignedCertificate } from '../../../src/export/certificate.js';
import { startExportServer, type ExportServer } from '../../../src/export/server.js';
import { createLogger } from '../../../src/util/logger.js';

const run = promisify(execFile);
const MiB = 1024 * 1024;
const TOKEN = 'a-token-of-the-export';

describe('the export server', () => {
  let dir: string;
  let disk: string;
  let server: ExportServer;
  let base: string;
  let now = new Date('2026-11-30T10:00:00Z');
  const written = randomBytes(MiB);
  let trusting: Agent;
  /** A GET that trusts the export's certificate alone, for its Service's name. */
  const fetch = (url: string, init: { headers?: Record<string, string> } = {}) =>
    undiciFetch(url, { ...init, dispatcher: trusting });

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'vmop-export-'));
    disk = join(dir, 'disk.raw');
    // 32 MiB, 1 MiB of data at 8 MiB and "hello" at 20 MiB: the rest is zeros.
    const file = await open(disk, 'w');
    await file.truncate(32 * MiB);
    await file.write(written, 0, written.length, 8 * MiB);
    await file.write(Buffer.from('hello'), 0, 5, 20 * MiB);
    await file.close();
    const tls = await selfSignedCertificate(
      exportServerHostnames('out', 'team-a'),
      new Date(Date.now() + 3_600_000),
    );
    trusting = new Agent({
      connect: { ca: tls.cert, servername: exportServerHostnames('out', 'team-a')[0] },
    });
    server = await startExportServer({
      disks: [{ name: 'system', device: disk }],
      token: TOKEN,
      tls,
      expiresAt: new Date('2026-11-30T12:00:00Z'),
      scratchDir: dir,
      port: 0,
      host: '127.0.0.1',
      logger: createLogger('export-test'),
      now: () => now,
    });
    base = `https://127.0.0.1:${server.port}`;
    await server.ready;
  });
  afterAll(async () => {
    await server?.close();
    await trusting?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const get = (path: string, headers: Record<string, string> = {}) =>
    fetch(`${base}${path}`, { headers: { 'x-vmop-export-token': TOKEN, ...headers } });

  it('is ready once the qcow2 image is made', async () => {
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
  });

  it("speaks HTTPS only with the export's certificate: refused by a client that trusts only the system's CAs or expects another name", async () => {
    const systemTrust = new Agent();
    await expect(undiciFetch(`${base}/healthz`, { dispatcher: systemTrust })).rejects.toThrow();
    const otherName = new Agent({ connect: { servername: 'other-export.team-a.svc' } });
    await expect(undiciFetch(`${base}/healthz`, { dispatcher: otherName })).rejects.toThrow();
    await expect(undiciFetch(`http://127.0.0.1:${server.port}/healthz`)).rejects.toThrow();
    await Promise.all([systemTrust.close(), otherName.close()]);
  });

  it('refuses a download without the token or with another', async () => {
    expect((await fetch(`${base}/disks/system.raw`)).status).toBe(401);
    expect((await get('/disks/system.raw', { 'x-vmop-export-token': 'guessed' })).status).toBe(401);
    expect((await fetch(`${base}/disks/system.raw?token=guessed`)).status).toBe(401);
  });

  it('serves the raw disk byte for byte, and a range of it', async () => {
    const whole = Buffer.from(await (await get('/disks/system.raw')).arrayBuffer());
    expect(whole.length).toBe(32 * MiB);
    expect(whole.subarray(8 * MiB, 9 * MiB).equals(written)).toBe(true);
    const range = await get('/disks/system.raw', { range: `bytes=${20 * MiB}-${20 * MiB + 4}` });
    expect(range.status).toBe(206);
    expect(range.headers.get('content-range')).toBe(`bytes ${20 * MiB}-${20 * MiB + 4}/${32 * MiB}`);
    expect(await range.text()).toBe('hello');
    expect((await get('/disks/system.raw', { range: `bytes=${40 * MiB}-` })).status).toBe(416);
  });

  it('serves a sparse qcow2 image (the token also as ?token=) that holds the same disk', async () => {
    const response = await fetch(`${base}/disks/system.qcow2?token=${TOKEN}`);
    expect(response.status).toBe(200);
    const image = join(dir, 'downloaded.qcow2');
    await writeFile(image, Buffer.from(await response.arrayBuffer()));
    expect((await stat(image)).size).toBeLessThan(4 * MiB);
    const { stdout } = await run('qemu-img', ['compare', '-f', 'qcow2', '-F', 'raw', image, disk]);
    expect(stdout).toContain('Images are identical');
  });

  it('answers 404 for a disk it does not serve, naming the ones it does', async () => {
    const response = await get('/disks/data.raw');
    expect(response.status).toBe(404);
    expect(await response.text()).toContain('system');
  });

  it('serves nothing once expired', async () => {
    now = new Date('2026-11-30T12:00:00Z');
    expect((await get('/disks/system.raw')).status).toBe(410);
  });
});
