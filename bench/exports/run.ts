// npm run bench:exports — a disk served by `vmop export-server` (as a VirtualMachineExport's pod runs
// it, the compiled CLI) against reading the same disk in the same run: the raw download's time vs
// reading the disk file end to end (issue 54's goal: ≥ 0.8× the read's throughput), the qcow2
// image's making (the server's start) and its download, the downloads made with the CLI's client
// (node:https, trusting the export's certificate) and written as `vmop vm export -o` writes them.
// Over loopback HTTPS: the port-forward a download outside the cluster goes through (apiserver,
// kubelet) is not part of it. The disk in
// memory (tmpfs) so the machine's disk does not decide. BENCH_RUNS (default 3) runs of each,
// interleaved; BENCH_DISK_MIB (default 256) the disk's size.
import { spawn } from 'node:child_process';
import { createReadStream } from 'node:fs';
import { mkdtemp, open, rm, stat, writeFile } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import { get } from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { exportServerHostnames } from '../../src/api/virtual-machine-export.js';
import { selfSignedCertificate } from '../../src/export/certificate.js';
import { SparseWriter } from '../../src/export/sparse-writer.js';
import { renderTable } from '../../src/util/table.js';
import { makeDiskImage } from '../support/disk-image.js';

const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const MiB = 1024 ** 2;
const DISK_BYTES = Number(process.env.BENCH_DISK_MIB ?? 256) * MiB;
const ROOT = path.resolve(import.meta.dirname, '../..');
const TOKEN = 'bench-token';
const [HOSTNAME] = exportServerHostnames('bench', 'default');
const TLS = await selfSignedCertificate([HOSTNAME!], new Date(Date.now() + 86_400_000));
const PORT = 18_080;

const seconds = async (work: () => Promise<unknown>) => {
  const started = performance.now();
  await work();
  return (performance.now() - started) / 1000;
};

async function readFileThrough(file: string): Promise<number> {
  let bytes = 0;
  for await (const chunk of createReadStream(file, { highWaterMark: MiB })) bytes += (chunk as Buffer).length;
  return bytes;
}

/**
 * A GET as `vmop vm export -o` makes it (node:https, the body written by its SparseWriter to
 * `to.file`), or only counted when `to` is not given; returns the bytes.
 */
async function download(url: string, to?: { file: string; sparse: boolean }): Promise<number> {
  const response = await new Promise<IncomingMessage>((resolve, reject) =>
    get(url, { headers: { 'x-vmop-export-token': TOKEN }, ca: TLS.cert, servername: HOSTNAME }, resolve).on(
      'error',
      reject,
    ),
  );
  if (response.statusCode !== 200) throw new Error(`${url}: HTTP ${response.statusCode}`);
  if (!to) {
    let bytes = 0;
    for await (const chunk of response) bytes += (chunk as Buffer).length;
    return bytes;
  }
  const handle = await open(to.file, 'w');
  try {
    const writer = new SparseWriter(handle, to.sparse);
    for await (const chunk of response) await writer.write(chunk as Buffer);
    await writer.finish();
    return writer.written;
  } finally {
    await handle.close();
  }
}

/** The server started on `disk`; resolves once it answers ready (its qcow2 image made). */
async function startServer(dir: string, disk: string) {
  const child = spawn(
    'node',
    [
      path.join(ROOT, 'dist/cli/main.js'),
      'export-server',
      ...['--disk', `disk=${disk}`, '--token-file', path.join(dir, 'token')],
      ...['--tls-cert', path.join(dir, 'tls.crt'), '--tls-key', path.join(dir, 'tls.key')],
      ...['--expires-at', new Date(Date.now() + 3_600_000).toISOString()],
      ...['--scratch', dir, '--port', String(PORT)],
    ],
    { stdio: 'ignore' },
  );
  const started = performance.now();
  for (;;) {
    const ready = await download(`https://127.0.0.1:${PORT}/healthz`).then(
      () => true,
      () => false,
    );
    if (ready) break;
    if (child.exitCode !== null) throw new Error('the export server ended');
    await sleep(20);
  }
  return { readyS: (performance.now() - started) / 1000, stop: () => child.kill('SIGTERM') };
}

const stats = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return { min: sorted[0]!, median: sorted[Math.floor(sorted.length / 2)]!, max: sorted.at(-1)! };
};

const dir = await mkdtemp(path.join(process.env.BENCH_DIR ?? '/dev/shm', 'vmop-bench-exports-'));
try {
  const disk = path.join(dir, 'disk.raw');
  await makeDiskImage(disk, DISK_BYTES);
  await writeFile(path.join(dir, 'token'), TOKEN);
  await writeFile(path.join(dir, 'tls.crt'), TLS.cert);
  await writeFile(path.join(dir, 'tls.key'), TLS.key);
  const times = {
    read: [] as number[],
    raw: [] as number[],
    rawToFile: [] as number[],
    ready: [] as number[],
    qcow2: [] as number[],
  };
  let qcow2Bytes = 0;
  for (let run = 0; run < RUNS; run++) {
    times.read.push(await seconds(() => readFileThrough(disk)));
    const server = await startServer(dir, disk);
    try {
      times.ready.push(server.readyS);
      times.raw.push(await seconds(() => download(`https://127.0.0.1:${PORT}/disks/disk.raw`)));
      const downloaded = path.join(dir, 'downloaded');
      times.rawToFile.push(
        await seconds(() =>
          download(`https://127.0.0.1:${PORT}/disks/disk.raw`, { file: downloaded, sparse: true }),
        ),
      );
      await rm(downloaded);
      times.qcow2.push(
        await seconds(() =>
          download(`https://127.0.0.1:${PORT}/disks/disk.qcow2`, { file: downloaded, sparse: false }),
        ),
      );
      await rm(downloaded);
      qcow2Bytes = (await stat(path.join(dir, 'disk.qcow2'))).size;
    } finally {
      server.stop();
      await sleep(200);
    }
  }
  const row = (what: string, values: number[]) => {
    const { min, median, max } = stats(values);
    return [what, min.toFixed(2), median.toFixed(2), max.toFixed(2)];
  };
  console.log(
    `\n${DISK_BYTES / MiB} MiB disk (40 % data), ${RUNS} runs each, ${os.cpus().length} CPUs; qcow2 image ${(qcow2Bytes / MiB).toFixed(0)} MiB\n`,
  );
  console.log(
    renderTable(
      ['seconds', 'min', 'median', 'max'],
      [
        row('reading the disk file', times.read),
        row('raw download (export server), counted', times.raw),
        row('raw download to a sparse file (as the CLI)', times.rawToFile),
        row('server ready (qcow2 image made)', times.ready),
        row('qcow2 download to a file', times.qcow2),
      ],
    ),
  );
  const median = (values: number[]) => stats(values).median;
  console.log(
    `\nraw download vs reading the disk: ${(median(times.read) / median(times.raw)).toFixed(2)}× the throughput (goal ≥ 0.8×)`,
  );
  console.log(
    `raw download to a sparse file vs reading the disk: ${(median(times.read) / median(times.rawToFile)).toFixed(2)}×`,
  );
  console.log(
    `qcow2 made and downloaded vs reading the disk: ${(median(times.read) / (median(times.ready) + median(times.qcow2))).toFixed(2)}×`,
  );
} finally {
  await rm(dir, { recursive: true, force: true });
}
