// npm run bench:disks — how fast `vmop import` fills a disk from a 1 GiB image over HTTP, beside
// the limits on the same machine in the same run: the download alone (curl > /dev/null) and the
// conversion alone (qemu-img convert of the same file, already local, onto the same disk). The
// image server is the test bed's; the disk is a loop device, as the local cluster's claims are,
// over a file in memory (tmpfs), so that disk writeback does not swamp what is compared.
// A qcow2 image also needs its download kept first (qemu-img seeks in it): its import is
// compared with download + convert run one after the other.
// BENCH_RUNS (default 5) runs of each, interleaved; min / median / max.
// Then attach and detach on `vmop dev` (attach.ts): BENCH_ATTACH_RUNS (default 20; 0 skips it)
// disks added to and removed from a running VM, p50 / p99 of request → seen by the guest.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { startImageServer } from '../../src/devenv/image-server.js';
import { ensureTestGuest } from '../../src/devenv/test-guest.js';
import { renderTable } from '../../src/util/table.js';
import { convertRawImage } from '../../test/support/disk-images.js';
import { benchAttach } from './attach.js';
import { makeDiskImage } from '../support/disk-image.js';
import { quantile } from '../support/quantile.js';

const run = promisify(execFile);
const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const ATTACH_RUNS = Number(process.env.BENCH_ATTACH_RUNS ?? 20);
const GiB = 1024 ** 3;
const MiB = 1024 ** 2;
const ROOT = path.resolve(import.meta.dirname, '../..');
/** The compiled CLI, as importer pods run it (tsx would add a second of start-up to every run). */
const VMOP = ['node', path.join(ROOT, 'dist/cli/main.js')] as const;

const seconds = async (command: string, args: string[]) => {
  const started = process.hrtime.bigint();
  await run(command, args, { maxBuffer: 16 * MiB });
  return Number(process.hrtime.bigint() - started) / 1e9;
};

const stats = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return { min: sorted[0]!, median: sorted[Math.floor(sorted.length / 2)]!, max: sorted.at(-1)! };
};

async function main() {
  // In memory (tmpfs) where there is room: the machine's disk writeback made runs vary by 2×.
  const dir = await mkdtemp(
    path.join(existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir(), 'vmop-bench-disks-'),
  );
  const served = path.join(dir, 'served');
  const scratch = path.join(dir, 'scratch');
  await mkdir(scratch);
  await run('npm', ['run', 'build'], { cwd: ROOT });
  const guest = await ensureTestGuest();
  const server = await startImageServer({ dir: served, host: '127.0.0.1', testGuestDir: guest.dir });
  const backing = path.join(dir, 'disk.img');
  let loop = '';
  try {
    await makeDiskImage(path.join(served, 'image.raw'), GiB);
    await convertRawImage(path.join(served, 'image.raw'), path.join(served, 'image.qcow2'), 'qcow2');
    await run('truncate', ['-s', String(GiB + 64 * MiB), backing]);
    loop = (await run('losetup', ['--find', '--show', backing])).stdout.trim();
    const zero = () => run('blkdiscard', ['--zeroout', loop]);
    const local = (name: string) => path.join(served, name);
    const url = (name: string) => `${server.url}/${name}`;
    const convert = (format: string, name: string) =>
      seconds('qemu-img', [
        'convert',
        '-f',
        format,
        '-O',
        'raw',
        '-n',
        '--target-is-zero',
        local(name),
        loop,
      ]);
    const importing = (name: string) =>
      seconds(VMOP[0], [
        VMOP[1],
        'import',
        '--url',
        url(name),
        '--target',
        loop,
        '--scratch',
        scratch,
        '--outcome-file',
        path.join(dir, 'outcome.json'),
      ]);
    const rows: Record<string, number[]> = {};
    const measure = async (label: string, fn: () => Promise<number>) => {
      await zero();
      await run('sync');
      (rows[label] ??= []).push(await fn());
    };
    for (let i = 0; i < RUNS; i++) {
      await measure('vmop start-up alone (import --help)', () =>
        seconds(VMOP[0], [VMOP[1], 'import', '--help']),
      );
      await measure('download raw (curl > /dev/null)', () =>
        seconds('curl', ['-sf', '-o', '/dev/null', url('image.raw')]),
      );
      await measure('convert raw (qemu-img, local file)', () => convert('raw', 'image.raw'));
      await measure('vmop import raw', () => importing('image.raw'));
      await measure('download qcow2 (curl > file)', () =>
        seconds('curl', ['-sf', '-o', path.join(scratch, 'copy.qcow2'), url('image.qcow2')]),
      );
      await measure('convert qcow2 (qemu-img, local file)', () => convert('qcow2', 'image.qcow2'));
      await measure('vmop import qcow2', () => importing('image.qcow2'));
      await rm(path.join(scratch, 'copy.qcow2'), { force: true });
    }
    const median = (label: string) => stats(rows[label]!).median;
    const limits: Record<string, number> = {
      'vmop import raw': Math.max(
        median('download raw (curl > /dev/null)'),
        median('convert raw (qemu-img, local file)'),
      ),
      'vmop import qcow2':
        median('download qcow2 (curl > file)') + median('convert qcow2 (qemu-img, local file)'),
    };
    console.log(`1 GiB image (40% data), ${RUNS} runs each, on ${os.cpus().length} cores; disk: loop device`);
    console.log(
      renderTable(
        ['', 'min s', 'median s', 'max s', 'MiB/s (median)', 'limit / this'],
        Object.entries(rows).map(([label, values]) => {
          const { min, median: mid, max } = stats(values);
          const limit = limits[label];
          return [
            label,
            min.toFixed(2),
            mid.toFixed(2),
            max.toFixed(2),
            (1024 / mid).toFixed(0),
            limit ? (limit / mid).toFixed(2) : '',
          ];
        }),
      ),
    );
    console.log(
      'limit: raw streams, so the slower of download and convert; qcow2: download, then convert. Goal: ≥ 0.80',
    );
  } finally {
    if (loop) await run('losetup', ['--detach', loop]).catch(() => undefined);
    await server.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

async function attachTable() {
  const { attachMs, detachMs } = await benchAttach(ATTACH_RUNS);
  console.log(`\n${ATTACH_RUNS} disks attached to and detached from a running VM (vmop dev, TCG guest)`);
  console.log(
    renderTable(
      ['', 'p50 ms', 'p99 ms', 'max ms', 'goal p99'],
      [
        ['attach: spec patched → the guest has the disk', attachMs, '< 5000 ms'],
        ['detach: spec patched → the guest let it go', detachMs, ''],
      ].map(([label, values, goal]) => {
        const times = values as number[];
        return [
          label as string,
          quantile(times, 0.5).toFixed(0),
          quantile(times, 0.99).toFixed(0),
          Math.max(...times).toFixed(0),
          goal ? `${goal as string}: ${quantile(times, 0.99) < 5000 ? 'MET' : 'MISSED'}` : '',
        ];
      }),
    ),
  );
}

if (RUNS > 0) await main();
if (ATTACH_RUNS > 0) await attachTable();
