// The runner with the real qemu-guest-agent (Debian's, in the test guest): OS info and the IP
// address in the snapshot; a stop goes through the agent, and falls back to the ACPI power
// button when the agent is gone.
import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { RunnerConfigInput } from '../../../src/api/runner-config.js';
import {
  configYaml,
  makeImageRepository,
  makeTempDir,
  openConsole,
  ProjectedVolume,
  startRunner,
  waitForConsoleLog,
  type RunnerProcess,
} from './harness.js';

describe('runner: qemu-guest-agent', () => {
  let tmp: string;
  let runner: RunnerProcess | undefined;
  const consoleLog = () => path.join(tmp, 'data', 'console.log');

  beforeEach(async () => {
    tmp = await makeTempDir('runner-agent');
  });
  afterEach(async () => {
    await runner?.stop();
    runner = undefined;
    await rm(tmp, { recursive: true, force: true });
  });

  const boot = async () => {
    const config: RunnerConfigInput = {
      '/Runner': {
        dataDir: path.join(tmp, 'data'),
        runtimeDir: path.join(tmp, 'run'),
        template: 'test-guest.liquid',
        imageRepository: await makeImageRepository(path.join(tmp, 'images')),
        vm: { name: 'agent', maximumRam: '256Mi', network: [{ type: 'user' }], powerdownTimeout: 60 },
      },
    };
    const volume = await ProjectedVolume.create(path.join(tmp, 'etc'), { 'config.yaml': configYaml(config) });
    runner = await startRunner(volume.file('config.yaml'));
    await waitForConsoleLog(consoleLog(), 'VMOP-GUEST-READY');
    return runner.waitForSnapshot(
      (snapshot) =>
        snapshot.guestAgent?.connected === true && (snapshot.guestAgent.addresses?.length ?? 0) > 0,
      120_000,
    );
  };

  it("reports the guest's OS and address, and a stop goes through the agent", async () => {
    const snapshot = await boot();
    expect(snapshot.guestAgent?.osinfo).toMatchObject({
      id: 'vmop-test-guest',
      'pretty-name': 'vmop test guest',
      'version-id': '1',
      'kernel-release': expect.stringMatching(/-cloud-amd64$/),
    });
    expect(snapshot.guestAgent?.addresses).toContain('10.0.2.15'); // and an IPv6 one from slirp, later

    runner!.kill('SIGTERM');
    expect(await runner!.exited).toEqual({ code: 0, signal: null });
    const log = await readFile(consoleLog(), 'utf8');
    expect(log).toContain('vmop-guest: guest agent shutdown, powering off');
    expect(log).not.toContain('vmop-guest: power button');
    expect(runner!.snapshots().at(-1), runner!.logTail()).toMatchObject({
      phase: 'stopped',
      lastShutdown: { guest: true, reason: 'guest-shutdown' },
    });
  });

  it('with the agent stopped in the guest, the stop falls back to the ACPI power button', async () => {
    await boot();
    const guestConsole = await openConsole(
      path.join(tmp, 'run', 'console-sessions.sock'),
      path.join(tmp, 'client.log'),
    );
    try {
      expect(await guestConsole.run('killall qemu-ga')).toBe(0);
      await runner!.waitForSnapshot((snapshot) => snapshot.guestAgent?.connected === false);
      runner!.kill('SIGTERM');
      await guestConsole.waitForLine(/vmop-guest: power button, powering off$/);
      expect(await runner!.exited).toEqual({ code: 0, signal: null });
    } finally {
      guestConsole.close();
    }
    expect(await readFile(consoleLog(), 'utf8')).not.toContain('guest agent shutdown');
  });
});
