// npm run bench:snapshots — a running VM's disk copied as a snapshot copies it (issue 54's QEMU path:
// the runner's SnapshotCopyController, the guest frozen through its real qemu-guest-agent, one
// blockdev-backup into a qemu-nbd export over TLS-PSK) beside `qemu-img convert` of the same disk
// onto a local file in the same run, and the guest's responsiveness meanwhile: guest-agent pings
// every 20 ms from the cut until the copy is complete vs the same pings while it does not copy (the
// longest answer is the guest's longest stall a caller sees). The test guest under TCG, its disk and the copy in memory
// (tmpfs) so that the machine's disk writeback does not swamp what is compared.
// BENCH_RUNS (default 3) runs of each, interleaved; BENCH_DISK_MIB (default 256) the disk's size.
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { DriveConfig } from '../../src/api/runner-config.js';
import type { SnapshotCopyState } from '../../src/api/snapshot-copy.js';
import { ensureTestGuest } from '../../src/devenv/test-guest.js';
import { SnapshotCopyController } from '../../src/runner/controllers/snapshot-copy.js';
import { GuestAgentClient } from '../../src/runner/guest-agent/client.js';
import { addPskCredentials } from '../../src/runner/migration/qmp.js';
import { QmpClient } from '../../src/runner/qmp/client.js';
import { createLogger } from '../../src/util/logger.js';
import { renderTable } from '../../src/util/table.js';
import { launchTestGuest } from '../../test/support/qemu.js';
import { makeDiskImage } from '../support/disk-image.js';
import { quantile } from '../support/quantile.js';

const run = promisify(execFile);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const MiB = 1024 ** 2;
const DISK_BYTES = Number(process.env.BENCH_DISK_MIB ?? 256) * MiB;
const PING_EVERY_MS = 20;
const logger = createLogger('bench-snapshots');

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Pings the guest agent every PING_EVERY_MS until stopped; the answers' times in ms. */
function pinging(agent: GuestAgentClient) {
  const times: number[] = [];
  let stopped = false;
  const done = (async () => {
    while (!stopped) {
      const started = performance.now();
      await agent.execute('guest-ping', { timeoutMs: 30_000 });
      times.push(performance.now() - started);
      await sleep(PING_EVERY_MS);
    }
  })();
  return {
    stop: async () => {
      stopped = true;
      await done;
      return times;
    },
  };
}

const stats = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return { min: sorted[0]!, median: sorted[Math.floor(sorted.length / 2)]!, max: sorted.at(-1)! };
};
const fixed = (value: number, digits = 2) => value.toFixed(digits);

async function main() {
  const dir = await mkdtemp(path.join(existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir(), 'vmop-bench-snap-'));
  const file = (name: string) => path.join(dir, name);
  const keys = file('keys');
  await mkdir(keys);
  await writeFile(path.join(keys, 'keys.psk'), `vmop:${randomBytes(32).toString('hex')}\n`);
  await makeDiskImage(file('disk.raw'), DISK_BYTES);
  await writeFile(file('copy.raw'), '');
  await run('truncate', ['-s', String(DISK_BYTES), file('copy.raw')]);
  const port = await freePort();
  const nbd = spawn(
    'qemu-nbd',
    [
      ...['--object', `tls-creds-psk,id=tls0,endpoint=server,dir=${keys}`, '--tls-creds', 'tls0'],
      ...['--format', 'raw', '--persistent', '--shared', '1', '--export-name', 'disk'],
      ...['--bind', '127.0.0.1', '--port', String(port), file('copy.raw')],
    ],
    { stdio: 'ignore' },
  );
  const qemu = await launchTestGuest(await ensureTestGuest(), {
    args: [
      ...['-blockdev', `driver=file,filename=${file('disk.raw')},node-name=disk0-file`],
      ...['-blockdev', 'driver=raw,file=disk0-file,node-name=disk0', '-device', 'virtio-blk-pci,drive=disk0'],
      ...['-chardev', `socket,id=qga,path=${file('qga.sock')},server=on,wait=off`],
      ...['-device', 'virtserialport,chardev=qga,name=org.qemu.guest_agent.0'],
    ],
  });
  const qmp = await QmpClient.connect(qemu.qmpSocket);
  try {
    await qemu.console.waitForLine('VMOP-GUEST-READY', { timeoutMs: 180_000 });
    const agent = await GuestAgentClient.connect(file('qga.sock'));
    for (let attempt = 0; ; attempt++) {
      try {
        await agent.execute('guest-ping', { timeoutMs: 2_000 });
        break;
      } catch (err) {
        if (attempt > 60) throw err;
      }
    }
    let reported: (state: SnapshotCopyState | undefined) => void = () => undefined;
    const controller = new SnapshotCopyController({
      qmp,
      drives: [DriveConfig.parse({ type: 'raw', resource: '/dev/data' })],
      attached: () => [],
      credentials: async () => {
        await addPskCredentials(qmp, 'client', keys, 'vmop', 'bench-tls');
        return 'bench-tls';
      },
      agent: () => agent,
      publish: (state) => reported(state),
      logger,
    });

    const copies: number[] = [];
    const converts: number[] = [];
    const overNbd: number[] = [];
    const frozen: number[] = [];
    const stalls: number[] = [];
    const quiet: number[] = [];
    for (let index = 0; index < RUNS; index++) {
      const idle = pinging(agent);
      await sleep(3_000);
      quiet.push(...(await idle.stop()));

      // Pinged from the cut on: what the guest feels of the copy, not of the freeze before it.
      let pings: ReturnType<typeof pinging> | undefined;
      const started = performance.now();
      const ended = new Promise<SnapshotCopyState>((resolve) => {
        reported = (state) => {
          if (state?.state === 'copying' && state.cutAt) pings ??= pinging(agent);
          if (state?.state === 'completed' || state?.state === 'failed') resolve(state);
        };
      });
      await controller.apply({
        id: `bench-${index}`,
        requireFreeze: true,
        disks: [{ volume: 'data', host: '127.0.0.1', port, export: 'disk' }],
      });
      const end = await ended;
      copies.push((performance.now() - started) / 1000);
      stalls.push(...((await pings?.stop()) ?? []));
      if (end.state !== 'completed') throw new Error(`the copy failed: ${end.message}`);
      if (end.consistency !== 'FileSystem') throw new Error(`not frozen: ${end.reason}`);
      frozen.push(end.frozenMs ?? NaN);
      await controller.apply(undefined);
      // The copy is the disk (the guest wrote nothing meanwhile).
      await run('cmp', [file('disk.raw'), file('copy.raw')]);

      await rm(file('converted.raw'), { force: true });
      const convertStarted = performance.now();
      // -U: the running QEMU holds the disk's lock; the guest writes nothing meanwhile.
      await run('qemu-img', [
        'convert',
        '-U',
        '-f',
        'raw',
        '-O',
        'raw',
        file('disk.raw'),
        file('converted.raw'),
      ]);
      converts.push((performance.now() - convertStarted) / 1000);
      // The same convert onto the export the snapshot copies into: what NBD and TLS cost.
      const overNbdStarted = performance.now();
      await run('qemu-img', [
        ...['convert', '-U', '-n', '-f', 'raw'],
        ...['--object', `tls-creds-psk,id=tls0,endpoint=client,dir=${keys},username=vmop`],
        file('disk.raw'),
        ...[
          '--target-image-opts',
          `driver=raw,file.driver=nbd,file.host=127.0.0.1,file.port=${port},file.export=disk,file.tls-creds=tls0`,
        ],
      ]);
      overNbd.push((performance.now() - overNbdStarted) / 1000);
    }
    agent.close();

    const [copy, convert, nbdConvert, freeze] = [
      stats(copies),
      stats(converts),
      stats(overNbd),
      stats(frozen),
    ];
    const mib = DISK_BYTES / MiB;
    console.log(
      `\nA running VM's ${mib} MiB disk (40% data) copied at one instant, ${RUNS} runs, TCG guest, tmpfs\n`,
    );
    console.log(
      renderTable(
        ['what', 'min', 'median', 'max'],
        [
          [
            'snapshot copy (freeze, cut, copy over NBD/TLS), s',
            ...[copy.min, copy.median, copy.max].map((v) => fixed(v)),
          ],
          [
            'qemu-img convert of the same disk, s',
            ...[convert.min, convert.median, convert.max].map((v) => fixed(v)),
          ],
          [
            'qemu-img convert onto the same NBD/TLS export, s',
            ...[nbdConvert.min, nbdConvert.median, nbdConvert.max].map((v) => fixed(v)),
          ],
          ['guest frozen, ms', ...[freeze.min, freeze.median, freeze.max].map((v) => fixed(v, 0))],
        ],
      ),
    );
    console.log(
      `\nthroughput, copy vs qemu-img convert (median): ${fixed(convert.median / copy.median)}× (goal ≥ 0.8×)`,
    );
    console.log(
      `throughput, copy vs qemu-img convert onto the same export (median): ${fixed(nbdConvert.median / copy.median)}×`,
    );
    console.log(
      `guest-agent answers while copying: p50 ${fixed(quantile(stalls, 0.5), 1)} ms, p99 ${fixed(quantile(stalls, 0.99), 1)} ms, longest ${fixed(Math.max(...stalls), 1)} ms` +
        ` (while not: p50 ${fixed(quantile(quiet, 0.5), 1)} ms, longest ${fixed(Math.max(...quiet), 1)} ms);` +
        ` longest stall added ${fixed(Math.max(...stalls) - Math.max(...quiet), 1)} ms (goal ≤ 100 ms)`,
    );
  } finally {
    await qmp.close();
    await qemu.stop();
    nbd.kill();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
