import { readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../../src/util/free-port.js';
import {
  configYaml,
  makeEmptyDisk,
  makeTempDir,
  MiB,
  pidsWithArgument,
  startRunner,
  type RunnerProcess,
} from './harness.js';

/** The standard VM type under TCG with UEFI firmware and no OS: qemu starts and stops as configured. */
describe('runner: the standard VM template', () => {
  let tmp: string;
  let runner: RunnerProcess;

  beforeAll(async () => {
    tmp = await makeTempDir('runner-standard');
    const disk = await makeEmptyDisk(path.join(tmp, 'disk.img'), 64 * MiB);
    const configFile = path.join(tmp, 'config.yaml');
    await writeFile(
      configFile,
      configYaml({
        '/Runner': {
          dataDir: path.join(tmp, 'data'),
          runtimeDir: path.join(tmp, 'run'),
          vm: {
            name: 'standard',
            useTpm: true,
            firmware: 'uefi',
            accelerator: 'tcg',
            cpuModel: 'qemu64',
            maximumCpus: 4,
            currentCpus: 2,
            maximumRam: '512Mi',
            currentRam: '384Mi',
            powerdownTimeout: 1,
            network: [{ type: 'user' }],
            drives: [
              { type: 'raw', resource: disk, bootindex: 0 },
              { type: 'ide-cd', file: '' },
            ],
            display: { spice: { port: await freePort() } },
          },
        },
      }),
    );
    runner = await startRunner(configFile);
  });

  afterAll(async () => {
    await runner?.stop();
    await rm(tmp, { recursive: true, force: true });
  });

  it('starts qemu with the configured devices and hot-plugs to currentCpus before the guest runs', async () => {
    const running = await runner.waitForSnapshot((snapshot) => snapshot.phase === 'booting');
    expect(running).toMatchObject({ cpus: 2, drives: { cd0: { tray: 'closed' } } });
    const argv = (await readFile(`/proc/${running.qemuPid}/cmdline`, 'utf8')).split('\0');
    const uuid = (await readFile(path.join(tmp, 'data/uuid.txt'), 'utf8')).trim();
    expect(argv).toEqual(expect.arrayContaining(['-uuid', uuid, '-device', 'tpm-tis,tpmdev=tpm0']));
    expect(argv).toContain('-smp');
    expect(argv[argv.indexOf('-smp') + 1]).toBe('1,maxcpus=4');
    expect(argv.some((arg) => arg.includes(`filename=${path.join(tmp, 'data/fw-vars.fd')}`))).toBe(true);
    expect(argv.some((arg) => arg.startsWith('virtio-blk-pci,id=disk0-device,drive=disk0,bootindex=0'))).toBe(
      true,
    );
  });

  it('quits qemu after powerdownTimeout when nothing in the VM handles the power button', async () => {
    runner.kill('SIGTERM');
    expect(await runner.exited).toEqual({ code: 0, signal: null });
    expect(runner.snapshots().at(-1), runner.logTail()).toMatchObject({
      phase: 'stopped',
      lastShutdown: { reason: 'host-qmp-quit' },
    });
    expect(await pidsWithArgument(tmp)).toEqual([]);
  });
});
