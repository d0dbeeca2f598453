import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunnerConfigInput } from '../../../src/api/runner-config.js';
import {
  configYaml,
  makeImageRepository,
  makeTempDir,
  ProjectedVolume,
  startRunner,
  waitForConsoleLog,
  type RunnerProcess,
} from './harness.js';

const PASSWORD = 'pw-kept-out-of-everything-1f3e';
const userData = (password: string) =>
  `#cloud-config\nchpasswd:\n  users:\n    - {name: root, password: ${password}}\n`;
const AUTOUNATTEND = '<?xml version="1.0"?>\n<unattend xmlns="urn:schemas-microsoft-com:unattend"/>\n';

/** The lines the test guest prints for a file it found on a provisioning medium. */
const guestLines = (log: string, file: string) =>
  log
    .split(/\r?\n/)
    .filter((line) => line.startsWith(`vmop-guest: ${file}: `))
    .map((line) => line.slice(`vmop-guest: ${file}: `.length));

describe('runner: cloud-init and sysprep from Secret volumes, seen by the guest', () => {
  let tmp: string;
  let secret: ProjectedVolume;
  let config: string;
  let runner: RunnerProcess | undefined;
  const consoleLog = () => path.join(tmp, 'data', 'console.log');

  const boot = async () => {
    await rm(consoleLog(), { force: true });
    runner = await startRunner(config);
    await runner.waitForSnapshot((snapshot) => snapshot.booted);
    await waitForConsoleLog(consoleLog(), 'VMOP-GUEST-READY');
    return readFile(consoleLog(), 'utf8');
  };
  const stop = async () => {
    runner!.kill('SIGTERM');
    expect((await runner!.exited).code).toBe(0);
  };

  beforeAll(async () => {
    tmp = await makeTempDir('runner-provisioning');
    secret = await ProjectedVolume.create(path.join(tmp, 'cloud-init-secret'), {
      userData: userData(PASSWORD),
      metaData: 'local-hostname: from-the-secret\n',
    });
    await ProjectedVolume.create(path.join(tmp, 'sysprep-secret'), { 'autounattend.xml': AUTOUNATTEND });
    const settings: RunnerConfigInput = {
      '/Runner': {
        dataDir: path.join(tmp, 'data'),
        runtimeDir: path.join(tmp, 'run'),
        template: 'test-guest.liquid',
        imageRepository: await makeImageRepository(path.join(tmp, 'images')),
        cloudInit: { metaData: { 'local-hostname': 'inline' }, secretDir: secret.dir },
        sysprepDir: path.join(tmp, 'sysprep-secret'),
        vm: { name: 'provisioned', maximumRam: '256Mi', network: [], powerdownTimeout: 30 },
      },
    };
    config = (
      await ProjectedVolume.create(path.join(tmp, 'etc'), { 'config.yaml': configYaml(settings) })
    ).file('config.yaml');
  });

  afterAll(async () => {
    await runner?.stop();
    await rm(tmp, { recursive: true, force: true });
  });

  it("the guest reads the Secret's user-data as written, its meta-data merged over the config's, and the answer file on a CD", async () => {
    const log = await boot();
    expect(guestLines(log, 'user-data').join('\n') + '\n').toBe(userData(PASSWORD));
    const metaData = guestLines(log, 'meta-data');
    expect(metaData).toContain('local-hostname: from-the-secret');
    expect(metaData.filter((line) => line.startsWith('instance-id: v'))).toHaveLength(1);
    expect(guestLines(log, 'autounattend.xml').join('\n') + '\n').toBe(AUTOUNATTEND);
  });

  it("the Secret's contents are in no log line and no snapshot of the runner", () => {
    const published = JSON.stringify(runner!.logs) + JSON.stringify(runner!.snapshots());
    expect(published).not.toContain(PASSWORD);
    expect(published).not.toContain('from-the-secret');
  });

  it('a changed Secret is used at the next start, with a new instance-id', async () => {
    const before = guestLines(await readFile(consoleLog(), 'utf8'), 'meta-data').find((line) =>
      line.startsWith('instance-id:'),
    );
    await stop();
    await secret.update({ userData: userData('the-next-password') });
    const log = await boot();
    expect(guestLines(log, 'user-data')).toContain('    - {name: root, password: the-next-password}');
    const after = guestLines(log, 'meta-data').find((line) => line.startsWith('instance-id:'));
    expect(after).toMatch(/^instance-id: v[0-9a-f]{12}$/);
    expect(after).not.toBe(before);
  });

  it('a Secret without user data is a config error of cloudInit.secretDir, without its contents', async () => {
    await stop();
    await rm(secret.file('userData'));
    runner = await startRunner(config);
    const failed = await runner.waitForSnapshot((snapshot) => snapshot.phase === 'failed');
    expect(failed.configError).toEqual({
      field: 'cloudInit.secretDir',
      message: `the cloud-init Secret has no userData or userdata (in ${secret.dir})`,
    });
    expect((await runner.exited).code).toBe(1);
  });
});
