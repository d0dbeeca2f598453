// VM-Operator's auto-login with the real test guest: its vmop agent (on the virtio-serial port
// org.jdrupes.vmop_agent.0) logs the user of display.loggedInUser in and out as the config
// changes, and the snapshot says who is logged in.
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
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

describe("runner: VM-Operator's auto-login through the vmop agent", () => {
  let tmp: string;
  let runner: RunnerProcess | undefined;
  const consoleLog = () => path.join(tmp, 'data', 'console.log');

  beforeEach(async () => {
    tmp = await makeTempDir('runner-login');
  });
  afterEach(async () => {
    await runner?.stop();
    runner = undefined;
    await rm(tmp, { recursive: true, force: true });
  });

  it('logs the configured user in at boot, another one after a logout, and nobody once it goes', async () => {
    const config = (loggedInUser?: string): string =>
      configYaml({
        '/Runner': {
          dataDir: path.join(tmp, 'data'),
          runtimeDir: path.join(tmp, 'run'),
          template: 'test-guest.liquid',
          imageRepository: imageRepository,
          vm: {
            name: 'login',
            maximumRam: '256Mi',
            network: [],
            powerdownTimeout: 30,
            display: { loggedInUser },
          },
        },
      } as RunnerConfigInput);
    const imageRepository = await makeImageRepository(path.join(tmp, 'images'));
    const volume = await ProjectedVolume.create(path.join(tmp, 'etc'), { 'config.yaml': config('alice') });
    runner = await startRunner(volume.file('config.yaml'));
    await waitForConsoleLog(consoleLog(), 'vmop-guest: alice logged in');
    await runner.waitForSnapshot((s) => s.loggedInUser === 'alice');

    await volume.update({ 'config.yaml': config('bob') });
    await waitForConsoleLog(consoleLog(), 'vmop-guest: alice logged out');
    await waitForConsoleLog(consoleLog(), 'vmop-guest: bob logged in');
    const bob = await runner.waitForSnapshot((s) => s.loggedInUser === 'bob');
    expect(bob.restartChanges ?? []).toEqual([]); // a runtime change, no restart

    await volume.update({ 'config.yaml': config(undefined) });
    await waitForConsoleLog(consoleLog(), 'vmop-guest: bob logged out');
    const nobody = await runner.waitForSnapshot((s) => s.loggedInUser === undefined && s.seq > bob.seq);
    expect(nobody.phase).toBe('running');
  });
});
