// Disks attached to and detached from a running VM (the runner's part): a real qemu-nbd exports a
// disk file over TLS with the VM's pre-shared key, as the helper pod does; the runner attaches it
// when its config lists it (vm.hotplugDisks) and detaches it when it no longer does, and the
// guest sees the disk come and go without a restart.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, open, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunnerConfigInput } from '../../../src/api/runner-config.js';
import { freePort, waitForPort } from '../../../src/util/free-port.js';
import type { SerialConsole } from '../../support/qemu.js';
import {
  configYaml,
  makeImageRepository,
  makeTempDir,
  MiB,
  openConsole,
  ProjectedVolume,
  startRunner,
  waitForConsoleLog,
  type RunnerProcess,
} from './harness.js';

const DISK_BYTES = 24 * MiB;
const TAG = 'vmop-hotplug-disk';

/** qemu-nbd as the helper pod runs it (disks/attach-pod.ts), on this machine's loopback. */
async function exportDisk(file: string, keysDir: string, port: number): Promise<ChildProcess> {
  const nbd = spawn(
    'qemu-nbd',
    [
      ...['--object', `tls-creds-psk,id=tls0,endpoint=server,dir=${keysDir}`, '--tls-creds', 'tls0'],
      ...['--format', 'raw', '--persistent', '--shared', '1', '--export-name', 'disk'],
      ...['--bind', '127.0.0.1', '--port', String(port)],
      file,
    ],
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  await waitForPort(port);
  return nbd;
}

describe('runner: disks attached and detached at runtime', () => {
  let tmp: string;
  let volume: ProjectedVolume;
  let runner: RunnerProcess;
  let guest: SerialConsole;
  let config: RunnerConfigInput;
  const exports: ChildProcess[] = [];
  let port: number;
  let otherPort: number;

  const setHotplugDisks = async (hotplugDisks: Array<{ volume: string; port: number }>) => {
    const vm = {
      ...config['/Runner'].vm,
      hotplugDisks: hotplugDisks.map((disk) => ({ ...disk, host: '127.0.0.1', export: 'disk' })),
    };
    config = { '/Runner': { ...config['/Runner'], vm } };
    await volume.update({ 'config.yaml': configYaml(config) });
  };
  const lastSnapshot = () => runner.snapshots().at(-1)!;
  /** The guest's SCSI disks (sd*) with their sizes in bytes. */
  const guestDisks = async () =>
    (await guest.capture('for d in /sys/block/sd*; do [ -e $d ] && echo $(basename $d)=$(cat $d/size); done'))
      .map((line) => line.trim().split('='))
      .map(([name, sectors]) => ({ name, bytes: Number(sectors) * 512 }));

  beforeAll(async () => {
    tmp = await makeTempDir('runner-hotplug');
    const keys = path.join(tmp, 'keys');
    await mkdir(keys);
    await writeFile(path.join(keys, 'keys.psk'), `vmop:${randomBytes(32).toString('hex')}\n`);
    const otherKeys = path.join(tmp, 'other-keys');
    await mkdir(otherKeys);
    await writeFile(path.join(otherKeys, 'keys.psk'), `vmop:${randomBytes(32).toString('hex')}\n`);
    const disk = path.join(tmp, 'extra.img');
    await writeFile(disk, TAG);
    const handle = await open(disk, 'r+');
    await handle.truncate(DISK_BYTES);
    await handle.close();
    port = await freePort('127.0.0.1');
    exports.push(await exportDisk(disk, keys, port));
    // An export with another key: what a VM must never be able to open.
    const stranger = path.join(tmp, 'stranger.img');
    await writeFile(stranger, '');
    const strangerHandle = await open(stranger, 'r+');
    await strangerHandle.truncate(DISK_BYTES);
    await strangerHandle.close();
    otherPort = await freePort('127.0.0.1');
    exports.push(await exportDisk(stranger, otherKeys, otherPort));

    config = {
      '/Runner': {
        dataDir: path.join(tmp, 'data'),
        runtimeDir: path.join(tmp, 'run'),
        template: 'test-guest.liquid',
        imageRepository: await makeImageRepository(path.join(tmp, 'images')),
        vm: { name: 'hotplug', maximumCpus: 1, currentCpus: 1, maximumRam: '256Mi', network: [], drives: [] },
      },
    };
    volume = await ProjectedVolume.create(path.join(tmp, 'etc'), { 'config.yaml': configYaml(config) });
    runner = await startRunner(volume.file('config.yaml'), {
      env: { ...process.env, VMOP_POD_NAME: 'hotplug-0', VMOP_MIGRATION_KEYS: keys },
    });
    await runner.waitForSnapshot((snapshot) => snapshot.booted);
    await waitForConsoleLog(path.join(tmp, 'data', 'console.log'), 'VMOP-GUEST-READY');
    guest = await openConsole(
      path.join(tmp, 'run/console-sessions.sock'),
      path.join(tmp, 'console-client.log'),
    );
  });

  afterAll(async () => {
    guest?.close();
    await runner?.stop();
    for (const nbd of exports) nbd.kill('SIGKILL');
    await rm(tmp, { recursive: true, force: true });
  });

  it('attaches a listed disk: the running guest sees it with its content, and writes reach the export', async () => {
    expect(await guestDisks()).toEqual([]);
    const { runId } = lastSnapshot();
    await setHotplugDisks([{ volume: 'extra-disk', port }]);
    const attached = await runner.waitForSnapshot(
      (snapshot) => snapshot.hotplugDisks?.['extra-disk']?.state === 'attached',
    );
    expect(attached.runId).toBe(runId);
    expect(runner.snapshots().some((s) => s.hotplugDisks?.['extra-disk']?.state === 'attaching')).toBe(true);
    await expect.poll(guestDisks, { timeout: 30_000 }).toEqual([{ name: 'sda', bytes: DISK_BYTES }]);
    expect(await guest.capture(`head -c ${TAG.length} /dev/sda; echo`)).toEqual([TAG]);
    expect(await guest.capture('cat /sys/block/sda/device/vendor /sys/block/sda/device/model')).toEqual([
      'QEMU    ',
      'QEMU HARDDISK   ',
    ]);
    expect(
      await guest.run(`echo written-by-guest | dd of=/dev/sda bs=512 seek=1 conv=fsync 2>/dev/null`),
    ).toBe(0);
    await expect
      .poll(async () => (await readFile(path.join(tmp, 'extra.img'))).subarray(512, 528).toString())
      .toBe('written-by-guest');
    // Not a restart change: nothing waits for one.
    expect(lastSnapshot().restartChanges).toBeUndefined();
  });

  it('detaches a disk no longer listed: the guest lets it go, the VM keeps running', async () => {
    const { runId, seq } = lastSnapshot();
    await setHotplugDisks([]);
    const detached = await runner.waitForSnapshot(
      (snapshot) => snapshot.seq > seq && snapshot.hotplugDisks === undefined,
    );
    expect(detached).toMatchObject({ runId, phase: 'running' });
    const states = runner.snapshots().filter((s) => s.seq > seq && s.seq < detached.seq);
    expect(states.map((s) => s.hotplugDisks?.['extra-disk']?.state)).toContain('detaching');
    await expect.poll(guestDisks, { timeout: 30_000 }).toEqual([]);
    expect(await guest.run('true')).toBe(0);
  });

  it('refuses an export with another key, says so, and attaches the right one when it comes', async () => {
    await setHotplugDisks([{ volume: 'stranger-disk', port: otherPort }]);
    const failed = await runner.waitForSnapshot(
      (snapshot) => snapshot.hotplugDisks?.['stranger-disk']?.state === 'failed',
    );
    expect(failed.hotplugDisks?.['stranger-disk']?.message).toMatch(/^attaching failed: /);
    expect(await guestDisks()).toEqual([]);

    // Corrected (another export): attached at once, the failed one is gone.
    await setHotplugDisks([{ volume: 'extra-disk', port }]);
    const attached = await runner.waitForSnapshot(
      (snapshot) =>
        snapshot.hotplugDisks?.['extra-disk']?.state === 'attached' &&
        !snapshot.hotplugDisks['stranger-disk'],
    );
    expect(Object.keys(attached.hotplugDisks!)).toEqual(['extra-disk']);
    await expect.poll(guestDisks, { timeout: 30_000 }).toEqual([{ name: 'sda', bytes: DISK_BYTES }]);
    expect(
      await guest.capture('dd if=/dev/sda bs=512 skip=1 count=1 2>/dev/null | head -c 16; echo'),
    ).toEqual(['written-by-guest']);
  });
});
