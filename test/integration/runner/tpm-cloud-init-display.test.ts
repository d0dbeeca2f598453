import { execFile } from 'node:child_process';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunnerConfigInput } from '../../../src/api/runner-config.js';
import { freePort } from '../../../src/util/free-port.js';
import type { SerialConsole } from '../../support/qemu.js';
import {
  configYaml,
  isRunning,
  processRef,
  makeImageRepository,
  makeTempDir,
  openConsole,
  pidsWithArgument,
  ProjectedVolume,
  startRunner,
  waitForConsoleLog,
  waitGone,
  type RunnerProcess,
} from './harness.js';
import { SPICE_LINK_OK, SPICE_LINK_PERMISSION_DENIED, spiceLogin } from '../../support/spice-login.js';
import { networkInterfaces } from 'node:os';
import { vncLogin } from '../../support/vnc-login.js';

const run = promisify(execFile);

describe('runner: TPM, cloud-init and display password (SPICE and VNC)', () => {
  let tmp: string;
  let volume: ProjectedVolume;
  let runner: RunnerProcess;
  let guestConsole: SerialConsole;
  let spicePort: number;
  let vncPort: number;
  let swtpmPids: number[];
  const runDir = () => path.join(tmp, 'run');

  beforeAll(async () => {
    tmp = await makeTempDir('runner-tpm');
    spicePort = await freePort();
    vncPort = await freePort();
    const config: RunnerConfigInput = {
      '/Runner': {
        dataDir: path.join(tmp, 'data'),
        runtimeDir: runDir(),
        template: 'test-guest.liquid',
        imageRepository: await makeImageRepository(path.join(tmp, 'images')),
        cloudInit: {
          metaData: { 'local-hostname': 'tpm-vm' },
          userData: { users: [{ name: 'demo', groups: ['wheel'] }] },
          networkConfig: { version: 2, ethernets: { eth0: { dhcp4: true } } },
        },
        vm: {
          name: 'tpm-vm',
          useTpm: true,
          maximumRam: '256Mi',
          network: [],
          display: { spice: { port: spicePort }, vnc: { port: vncPort } },
        },
      },
    };
    volume = await ProjectedVolume.create(path.join(tmp, 'etc'), {
      'config.yaml': configYaml(config),
      'display-password': 'first-secret',
      'password-expiry': '+3600',
    });
    runner = await startRunner(volume.file('config.yaml'));
    await runner.waitForSnapshot((snapshot) => snapshot.booted);
    await waitForConsoleLog(path.join(tmp, 'data', 'console.log'), 'VMOP-GUEST-READY');
    guestConsole = await openConsole(
      path.join(runDir(), 'console-sessions.sock'),
      path.join(tmp, 'client.log'),
    );
    swtpmPids = await pidsWithArgument(`dir=${path.join(tmp, 'data', 'swtpm')}`);
  });

  afterAll(async () => {
    guestConsole?.close();
    await runner?.stop();
    await rm(tmp, { recursive: true, force: true });
  });

  it('runs swtpm and gives the guest a TPM', async () => {
    expect(swtpmPids).toHaveLength(1);
    expect(await guestConsole.run('test -e /sys/class/tpm/tpm0')).toBe(0);
  });

  it('attaches a NoCloud image labelled CIDATA with meta-data, user-data and network-config', async () => {
    expect(await guestConsole.run('test "$(findfs LABEL=CIDATA)" = /dev/vda')).toBe(0);
    const image = path.join(runDir(), 'cloud-init.img');
    const mtools = (command: string, ...args: string[]) =>
      run(command, ['-i', image, ...args], { env: { ...process.env, MTOOLS_SKIP_CHECK: '1' } });
    expect((await mtools('mlabel', '-s', '::')).stdout).toContain('Volume label is CIDATA');
    const files = (await mtools('mdir', '-b', '::')).stdout.split('\n').filter(Boolean);
    expect(files.sort()).toEqual(['::/meta-data', '::/network-config', '::/user-data']);
    const metaData = (await mtools('mtype', '::meta-data')).stdout;
    expect(metaData).toMatch(/^instance-id: v[0-9a-f]{12}\n/);
    expect(metaData).toContain('local-hostname: tpm-vm\n');
    expect((await mtools('mtype', '::user-data')).stdout).toBe(
      '#cloud-config\nusers:\n  - name: demo\n    groups:\n      - wheel\n',
    );
    expect((await mtools('mtype', '::network-config')).stdout).toBe(
      'version: 2\nethernets:\n  eth0:\n    dhcp4: true\n',
    );
  });

  it('sets the display password from the secret file on SPICE and on VNC (loopback only), and tracks the console client', async () => {
    expect(runner.snapshots().at(-1)?.displayPasswordSerial).toBe(1);
    const wrong = await spiceLogin(spicePort, 'wrong');
    wrong.close();
    expect(wrong.result).toBe(SPICE_LINK_PERMISSION_DENIED);

    // VNC: locked with the same password, on the loopback only.
    expect(await vncLogin(vncPort, 'wrong')).toEqual({ result: 1, offered: [2] });
    expect((await vncLogin(vncPort, 'first-secret')).screen).toMatchObject({ width: 720, height: 400 });
    const external = Object.values(networkInterfaces())
      .flat()
      .find((address) => address?.family === 'IPv4' && !address.internal)?.address;
    expect(external).toBeDefined();
    await expect(vncLogin(vncPort, 'first-secret', external)).rejects.toThrow(/ECONNREFUSED/);

    const session = await spiceLogin(spicePort, 'first-secret');
    expect(session.result).toBe(SPICE_LINK_OK);
    await runner.waitForSnapshot((snapshot) => snapshot.consoleClient?.host === '127.0.0.1');
    session.close();
    const seq = runner.snapshots().at(-1)!.seq;
    await runner.waitForSnapshot((snapshot) => snapshot.seq > seq && snapshot.consoleClient === undefined);
  });

  it('applies a changed display password while the VM runs', async () => {
    await volume.update({ 'display-password': 'second-secret', 'password-expiry': '+3600' });
    await runner.waitForSnapshot((snapshot) => snapshot.displayPasswordSerial === 2);
    const old = await spiceLogin(spicePort, 'first-secret');
    old.close();
    expect(old.result).toBe(SPICE_LINK_PERMISSION_DENIED);
    const current = await spiceLogin(spicePort, 'second-secret');
    current.close();
    expect(current.result).toBe(SPICE_LINK_OK);
    expect((await vncLogin(vncPort, 'first-secret')).result).toBe(1);
    expect((await vncLogin(vncPort, 'second-secret')).result).toBe(0);
    const logs = JSON.stringify(runner.logs);
    expect(logs).not.toContain('first-secret');
    expect(logs).not.toContain('second-secret');
  });

  it('leaves neither qemu nor swtpm behind after SIGTERM', async () => {
    const qemu = processRef(runner.snapshots().at(-1)!.qemuPid!)!;
    runner.kill('SIGTERM');
    expect(await runner.exited).toEqual({ code: 0, signal: null });
    expect(isRunning(qemu)).toBe(false);
    for (const pid of swtpmPids) await waitGone(pid);
  });
});
