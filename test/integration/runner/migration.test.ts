// Live migration between two runners on this machine (real QEMU under TCG, TLS with a
// pre-shared key): the runners' part of it, as the manager and kubelet drive it (a migration
// annotation in each "pod's" downward API file, the key in its Secret volume). They share the data
// directory (as on a shared runner data volume); each has its own runtime directory, where the
// guest's "local" disk lives, so the source copies it to the target while the guest runs.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunnerConfigInput } from '../../../src/api/runner-config.js';
import { MIGRATION_ANNOTATION } from '../../../src/runner/migration/request.js';
import { listenForTarget, readPsk, type ChannelMessage } from '../../../src/runner/migration/channel.js';
import { freePort } from '../../../src/util/free-port.js';
import { eventually } from '../../support/eventually.js';
import type { SerialConsole } from '../../support/qemu.js';
import { PCR16_AFTER_EXTEND, PCR16_EXTEND } from '../../support/tpm.js';
import {
  configYaml,
  makeEmptyDisk,
  makeImageRepository,
  MiB,
  makeTempDir,
  openConsole,
  startRunner,
  waitForConsoleLog,
  type RunnerProcess,
} from './harness.js';

/** The highest tick the guest's counter printed in `text`. */
const highestTick = (text: string) =>
  Math.max(-1, ...[...text.matchAll(/^tick-(\d+)$/gm)].map((m) => Number(m[1])));

/**
 * A tick the counter prints now, after the session's replay of the serial log (which holds the
 * ticks from before, all of them also in the log file): a guest that started over prints none.
 */
async function liveTick(guest: SerialConsole, logFile: string): Promise<number> {
  const logged = highestTick((await readFile(logFile, 'utf8')).replaceAll('\r', ''));
  try {
    return await eventually(() => {
      const now = highestTick(guest.output);
      expect(now).toBeGreaterThan(logged + 2);
      return now;
    }, 30_000);
  } catch (err) {
    // Seen twice under a whole run's load, never alone: say what the console and the log held.
    const tail = (text: string) => JSON.stringify(text.replaceAll('\r', '').slice(-400));
    const log = await readFile(logFile, 'utf8');
    throw new Error(
      `no live tick past ${logged + 2}: the console shows ${tail(guest.output)}; the log file ends ${tail(log)}`,
      { cause: err },
    );
  }
}

describe('runner: live migration between two runners', () => {
  let tmp: string;
  let source: RunnerProcess;
  let target: RunnerProcess;
  let back: RunnerProcess | undefined;
  let guest: SerialConsole;
  let images: string;
  /** The guest's runners, and two targets it must not go to. */
  const RUNNERS = ['source', 'target', 'back', 'bigger', 'rogue'];
  const dataDir = () => path.join(tmp, 'data');
  const runtimeOf = (who: string) => path.join(tmp, `run-${who}`);
  const podInfo = (who: string) => path.join(tmp, `podinfo-${who}`);
  /** As kubelet writes the downward API file: `key="<%q-quoted value>"`. */
  const annotate = (who: string, request: object) =>
    writeFile(podInfo(who), `${MIGRATION_ANNOTATION}=${JSON.stringify(JSON.stringify(request))}\n`);
  /** Asks the source runner to be migration `id`'s source, copying its local disk; the port it listens on. */
  const sourceListening = async (id: string) => {
    await annotate('source', { id, role: 'source', mirror: [path.join(runtimeOf('source'), 'local.img')] });
    const listening = await source.waitForSnapshot(
      (s) => s.migration?.id === id && s.migration.state === 'listening',
    );
    return listening.migration!.port!;
  };
  /** Each runner's /metrics and /readyz (its pod's readiness probe). */
  const metricsPorts = new Map<string, number>();
  const readiness = async (who: string) =>
    (await fetch(`http://127.0.0.1:${metricsPorts.get(who)}/readyz`)).status;
  const runnerEnv = (who: string) => ({
    ...process.env,
    VMOP_METRICS_PORT: String(metricsPorts.get(who)),
    VMOP_POD_NAME: who,
    VMOP_POD_INFO: podInfo(who),
    VMOP_MIGRATION_KEYS: path.join(tmp, 'keys'),
  });

  beforeAll(async () => {
    tmp = await makeTempDir('runner-migration');
    await mkdir(path.join(tmp, 'keys'));
    await writeFile(path.join(tmp, 'keys', 'keys.psk'), `vmop:${randomBytes(32).toString('hex')}\n`);
    for (const who of RUNNERS) {
      metricsPorts.set(who, await freePort());
      await mkdir(runtimeOf(who), { recursive: true });
      await writeFile(podInfo(who), '');
      await makeEmptyDisk(path.join(runtimeOf(who), 'local.img'), 16 * 1024 * 1024);
    }
    await makeEmptyDisk(path.join(tmp, 'shared.img'), 16 * 1024 * 1024);
    images = await makeImageRepository(path.join(tmp, 'images'), ['disc-a', 'disc-b']);
    for (const who of RUNNERS) await writeFile(path.join(tmp, `${who}.yaml`), configYaml(config(who)));
    source = await startRunner(path.join(tmp, 'source.yaml'), { env: runnerEnv('source') });
  });

  // The same config for all; each runner has its own runtime directory (as pods have their own /tmp).
  const config = (who: string, maximumRam = '256Mi'): RunnerConfigInput => ({
    '/Runner': {
      dataDir: dataDir(),
      runtimeDir: runtimeOf(who),
      template: 'test-guest.liquid',
      imageRepository: images,
      vm: {
        name: 'migrating',
        maximumCpus: 2,
        currentCpus: 2,
        maximumRam,
        currentRam: '224Mi',
        useTpm: true,
        network: [{ type: 'user' }],
        drives: [
          { type: 'raw', file: path.join(runtimeOf(who), 'local.img') },
          { type: 'raw', file: path.join(tmp, 'shared.img') },
          // One CD stays in; the guest opens the other's tray before the move.
          { type: 'ide-cd', file: 'disc-a.iso' },
          { type: 'ide-cd', file: 'disc-b.iso' },
        ],
      },
    },
  });

  afterAll(async () => {
    guest?.close();
    await source?.stop();
    await target?.stop();
    await back?.stop();
    await rm(tmp, { recursive: true, force: true });
  });

  it('a guest runs at the source, with a second CPU, less RAM, data on both disks, a PCR extended and a CD tray open', async () => {
    await source.waitForSnapshot((snapshot) => snapshot.booted && snapshot.cpus === 2);
    await waitForConsoleLog(path.join(dataDir(), 'console.log'), 'VMOP-GUEST-READY');
    guest = await openConsole(
      path.join(runtimeOf('source'), 'console-sessions.sock'),
      path.join(tmp, 'console-1.log'),
    );
    expect(await guest.run('echo local-data | dd of=/dev/vda conv=fsync 2>/dev/null')).toBe(0);
    expect(await guest.run('echo shared-data | dd of=/dev/vdb conv=fsync 2>/dev/null')).toBe(0);
    // TPM state that lives only in swtpm's memory: PCR 16 extended (it starts at zero).
    expect(await guest.run(PCR16_EXTEND)).toBe(0);
    expect(await guest.capture('cat /sys/class/tpm/tpm0/pcr-sha256/16')).toContain(PCR16_AFTER_EXTEND);
    expect(await guest.run('eject /dev/sr1')).toBe(0);
    await source.waitForSnapshot((s) => s.drives.cd1?.tray === 'open');
    // A counter the guest prints every 100 ms: it must go on, not start over.
    expect(
      await guest.run('(i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.1; done) >/dev/ttyS0 & true'),
    ).toBe(0);
    await guest.waitForLine(/^tick-20$/);
  });

  it('a target whose QEMU differs (its config has more RAM) is refused before anything moves, saying what differs; the guest runs on at the source', async () => {
    await writeFile(path.join(tmp, 'bigger.yaml'), configYaml(config('bigger', '320Mi')));
    const port = await sourceListening('m0');
    await annotate('bigger', { id: 'm0', role: 'target', source: `127.0.0.1:${port}` });
    const bigger = await startRunner(path.join(tmp, 'bigger.yaml'), { env: runnerEnv('bigger') });
    try {
      const refused = await bigger.waitForSnapshot(
        (s) => s.migration?.id === 'm0' && s.migration.state === 'failed',
      );
      expect(refused.migration?.message).toBe(
        `the target's QEMU does not match the source's (${320 * MiB} bytes of RAM here, ${256 * MiB} at the source)`,
      );
      const given = await source.waitForSnapshot(
        (s) => s.migration?.id === 'm0' && s.migration.state === 'failed',
      );
      expect(given.phase).toBe('running');
    } finally {
      await bigger.stop();
    }
    await guest.waitForLine(/^tick-\d+$/); // the guest goes on
    expect(await guest.run('true')).toBe(0);
  });

  it('migrates to the target: the counter goes on, uptime too, both disks hold their data; CPUs, RAM, the TPM state and CD trays as before', async () => {
    // What a command printed, without the counter's lines. An answer must be one write (an echo of
    // it): the counter printed between the two writes of `head -c 10; echo` once, into its line.
    const answer = async (command: string) =>
      (await guest.capture(command))
        .filter((line) => !line.startsWith('tick-'))
        .join('')
        .trim();
    const uptimeBefore = Number(await answer('cut -d" " -f1 /proc/uptime'));
    expect(await readiness('source')).toBe(200); // the guest runs there
    const port = await sourceListening('m1');
    await annotate('target', { id: 'm1', role: 'target', source: `127.0.0.1:${port}` });
    target = await startRunner(path.join(tmp, 'target.yaml'), { env: runnerEnv('target') });
    const arrived = await target.waitForSnapshot(
      (s) => s.migration?.state === 'completed' && s.phase === 'running',
    );
    expect(arrived).toMatchObject({ cpus: 2, booted: true, migration: { id: 'm1', role: 'target' } });
    expect(arrived.ram).toBe(224 * 1024 * 1024);
    const left = await source.waitForSnapshot((s) => s.migration?.state === 'completed');
    expect(left.migration!.downtimeMs, JSON.stringify(left.migration)).toBeGreaterThan(0);
    expect(left.migration!.bytes).toBeGreaterThan(16 * 1024 * 1024); // the local disk and the RAM
    expect(left.lastShutdown).toBeUndefined(); // the guest did not shut down: it left
    // The source's qemu is gone; its runner stays (a restarted one would not boot the guest).
    await source.waitForLog((l) => l.msg === 'the guest migrated to another pod: waiting to be stopped');
    expect(source.running(), 'the source runner stays').toBe(true);
    // A Service's endpoint moves with the guest: the target's pod is ready, the source's no more.
    expect(await readiness('target')).toBe(200);
    expect(await readiness('source')).toBe(503);

    guest.close();
    guest = await openConsole(
      path.join(runtimeOf('target'), 'console-sessions.sock'),
      path.join(tmp, 'console-2.log'),
    );
    expect(await liveTick(guest, path.join(dataDir(), 'console.log'))).toBeGreaterThan(20); // went on from where it was
    expect(Number(await answer('cut -d" " -f1 /proc/uptime'))).toBeGreaterThan(uptimeBefore);
    expect(await answer('echo "$(dd if=/dev/vda bs=512 count=1 2>/dev/null | head -c 10)"')).toBe(
      'local-data',
    );
    expect(await answer('echo "$(dd if=/dev/vdb bs=512 count=1 2>/dev/null | head -c 11)"')).toBe(
      'shared-data',
    );
    expect(await answer('grep -c ^processor /proc/cpuinfo')).toBe('2');
    // The TPM's volatile state came along, and the CD in the closed drive.
    expect(await answer('cat /sys/class/tpm/tpm0/pcr-sha256/16')).toBe(PCR16_AFTER_EXTEND);
    expect(await answer('mount -r /dev/sr0 /mnt && cat /mnt/id.txt; umount /mnt')).toBe('disc-disc-a');
    // The guest opened the other's tray (its medium stays in, as in a real drive): it is open here
    // too, until the guest closes it again by reading.
    expect(arrived.drives).toMatchObject({
      cd0: { tray: 'closed', medium: 'disc-a.iso' },
      cd1: { tray: 'open', medium: 'disc-b.iso' },
    });
    expect(await answer('mount -r /dev/sr1 /mnt && cat /mnt/id.txt; umount /mnt')).toBe('disc-disc-b');
    await target.waitForSnapshot((s) => s.drives.cd1?.tray === 'closed');
  });

  it('migrates on from the runner it arrived in (whose QEMU came in by migration) to a third one', async () => {
    await annotate('target', {
      id: 'm2',
      role: 'source',
      mirror: [path.join(runtimeOf('target'), 'local.img')],
    });
    const listening = await target
      .waitForSnapshot((s) => s.migration?.id === 'm2' && s.migration.state === 'listening', 30_000)
      .catch((err: Error) => {
        throw new Error(
          `${err.message}\n${target.logs
            .slice(-15)
            .map((l) => JSON.stringify(l).slice(0, 300))
            .join('\n')}`,
        );
      });
    await annotate('back', { id: 'm2', role: 'target', source: `127.0.0.1:${listening.migration!.port}` });
    back = await startRunner(path.join(tmp, 'back.yaml'), { env: runnerEnv('back') });
    const arrived = await back.waitForSnapshot(
      (s) => s.migration?.state === 'completed' && s.phase === 'running',
    );
    expect(arrived).toMatchObject({ cpus: 2, booted: true, migration: { id: 'm2', role: 'target' } });
    const left = await target.waitForSnapshot(
      (s) =>
        s.migration?.id === 'm2' &&
        s.migration.state !== 'listening' &&
        s.migration.state !== 'transferring' &&
        s.migration.state !== 'mirroring' &&
        s.migration.state !== 'preparing',
    );
    expect(left.migration, JSON.stringify(left.migration)).toMatchObject({ state: 'completed' });
    guest.close();
    guest = await openConsole(
      path.join(runtimeOf('back'), 'console-sessions.sock'),
      path.join(tmp, 'console-3.log'),
    );
    expect(await liveTick(guest, path.join(dataDir(), 'console.log'))).toBeGreaterThan(20);
    const answer = async (command: string) =>
      (await guest.capture(command))
        .filter((l) => !l.startsWith('tick-'))
        .join('')
        .trim();
    expect(await answer('echo "$(dd if=/dev/vda bs=512 count=1 2>/dev/null | head -c 10)"')).toBe(
      'local-data',
    );
    // The TPM state went on from the first target's swtpm too.
    expect(await answer('cat /sys/class/tpm/tpm0/pcr-sha256/16')).toBe(PCR16_AFTER_EXTEND);
  });

  // A fake source (the real channel, driven by the test): what someone holding the VM's key could
  // send, which no runner sends.
  it('a target runs nothing the source names: sent an executable to start, it starts its own QEMU, which refuses a state it does not match', async () => {
    const rogue = await listenForTarget(await readPsk(path.join(tmp, 'keys', 'keys.psk')));
    const ran = path.join(tmp, 'rogue-ran');
    await annotate('rogue', { id: 'm9', role: 'target', source: `127.0.0.1:${rogue.port}` });
    const target = await startRunner(path.join(tmp, 'rogue.yaml'), { env: runnerEnv('rogue') });
    try {
      const channel = await rogue.accepted;
      expect(await channel.next()).toEqual({ type: 'hello', id: 'm9' });
      // As a runner before this one sent it: how to start QEMU, beside what changed.
      channel.send({
        type: 'bundle',
        qemu: { executable: '/bin/sh', args: ['-c', `touch ${ran}`], environment: {} },
        fingerprint: { machine: 'pc-q35-1.0-machine', ramBytes: 256 * MiB, devices: [] },
        cpus: [],
        media: {},
        mirror: [],
        booted: true,
      } as ChannelMessage);
      const refused = await target.waitForSnapshot(
        (s) => s.migration?.id === 'm9' && s.migration.state === 'failed',
      );
      // Its own QEMU answered: the machine type q35 stands for in this QEMU, its devices.
      expect(refused.migration?.message).toMatch(
        /^the target's QEMU does not match the source's \(machine pc-q35-\d+\.\d+-machine here, pc-q35-1\.0-machine at the source; only here: .*peripheral\/cd0: scsi-cd/,
      );
      expect(existsSync(ran)).toBe(false);
    } finally {
      await target.stop();
      rogue.close();
    }
  });
});
