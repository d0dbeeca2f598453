import { rm } from 'node:fs/promises';
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
  processRef,
  signalProcess,
  waitGone,
  type RunnerProcess,
} from './harness.js';

describe('runner: stopping', () => {
  let tmp: string;
  let runner: RunnerProcess | undefined;

  beforeEach(async () => {
    tmp = await makeTempDir('runner-stop');
  });
  afterEach(async () => {
    await runner?.stop();
    runner = undefined;
    await rm(tmp, { recursive: true, force: true });
  });

  const testGuestConfig = async (
    vm: Partial<RunnerConfigInput['/Runner']['vm']>,
  ): Promise<RunnerConfigInput> => ({
    '/Runner': {
      dataDir: path.join(tmp, 'data'),
      runtimeDir: path.join(tmp, 'run'),
      template: 'test-guest.liquid',
      imageRepository: await makeImageRepository(path.join(tmp, 'images')),
      vm: { name: 'stopper', maximumRam: '256Mi', network: [], ...vm },
    },
  });

  it('quits qemu after powerdownTimeout (changed while running) when the guest ignores the power button', async () => {
    const config = await testGuestConfig({ powerdownTimeout: 900 });
    const volume = await ProjectedVolume.create(path.join(tmp, 'etc'), { 'config.yaml': configYaml(config) });
    runner = await startRunner(volume.file('config.yaml'));
    const booted = await runner.waitForSnapshot((snapshot) => snapshot.booted);
    await waitForConsoleLog(path.join(tmp, 'data', 'console.log'), 'VMOP-GUEST-READY');
    const guestConsole = await openConsole(
      path.join(tmp, 'run/console-sessions.sock'),
      path.join(tmp, 'client.log'),
    );
    try {
      expect(await guestConsole.run('touch /run/vmop-ignore-powerbutton')).toBe(0);
      const vm = { ...config['/Runner'].vm, powerdownTimeout: 1 };
      await volume.update({ 'config.yaml': configYaml({ '/Runner': { ...config['/Runner'], vm } }) });
      await runner.waitForLog((line) => line.msg === 'config changed');

      runner.kill('SIGTERM');
      // The guest agent is asked first (powerdownTimeout ends before the power button is pressed).
      await guestConsole.waitForLine(/vmop-guest: (guest agent shutdown|power button) ignored$/);
      expect(await runner.exited).toEqual({ code: 0, signal: null });
    } finally {
      guestConsole.close();
    }
    await waitGone(booted.qemuPid!);
    expect(runner.logs.some((line) => line.msg === 'guest did not power down; quitting qemu')).toBe(true);
    expect(runner.snapshots().at(-1), runner.logTail()).toMatchObject({
      phase: 'stopped',
      lastShutdown: { guest: false, reason: 'host-qmp-quit' },
    });
  });

  it('presses the power button again while the guest has not powered down: a press it missed is not the end', async () => {
    const volume = await ProjectedVolume.create(path.join(tmp, 'etc'), {
      'config.yaml': configYaml(await testGuestConfig({ powerdownTimeout: 900 })),
    });
    runner = await startRunner(volume.file('config.yaml'));
    await runner.waitForSnapshot((snapshot) => snapshot.booted);
    await waitForConsoleLog(path.join(tmp, 'data', 'console.log'), 'VMOP-GUEST-READY');
    const guestConsole = await openConsole(
      path.join(tmp, 'run/console-sessions.sock'),
      path.join(tmp, 'client.log'),
    );
    try {
      // Deaf to the first press, as a guest is early in its boot; listening from then on.
      expect(await guestConsole.run('touch /run/vmop-ignore-powerbutton')).toBe(0);
      runner.kill('SIGTERM');
      await guestConsole.waitForLine(/vmop-guest: power button ignored$/);
      expect(await guestConsole.run('rm /run/vmop-ignore-powerbutton')).toBe(0);
      expect(await runner.exited).toEqual({ code: 0, signal: null });
    } finally {
      guestConsole.close();
    }
    expect(
      runner.logs.some(
        (line) => line.msg === 'the guest has not powered down; pressing the power button again',
      ),
    ).toBe(true);
    expect(runner.logs.some((line) => line.msg === 'guest did not power down; quitting qemu')).toBe(false);
    expect(runner.snapshots().at(-1), runner.logTail()).toMatchObject({
      phase: 'stopped',
      lastShutdown: { guest: true },
    });
  });

  it('exits 0 when the guest powers itself off', async () => {
    const volume = await ProjectedVolume.create(path.join(tmp, 'etc'), {
      'config.yaml': configYaml(await testGuestConfig({})),
    });
    runner = await startRunner(volume.file('config.yaml'));
    await runner.waitForSnapshot((snapshot) => snapshot.booted);
    await waitForConsoleLog(path.join(tmp, 'data', 'console.log'), 'VMOP-GUEST-READY');
    const guestConsole = await openConsole(
      path.join(tmp, 'run/console-sessions.sock'),
      path.join(tmp, 'client.log'),
    );
    guestConsole.type('poweroff -f');
    expect(await runner.exited).toEqual({ code: 0, signal: null });
    guestConsole.close();
    expect(runner.snapshots().at(-1), runner.logTail()).toMatchObject({
      phase: 'stopped',
      lastShutdown: { guest: true },
    });
  });

  it('with guestShutdownStops, stays after the guest powered off (so the pod does not reboot it) until stopped', async () => {
    const config = await testGuestConfig({});
    config['/Runner'].guestShutdownStops = true;
    const volume = await ProjectedVolume.create(path.join(tmp, 'etc'), { 'config.yaml': configYaml(config) });
    runner = await startRunner(volume.file('config.yaml'));
    const booted = await runner.waitForSnapshot((snapshot) => snapshot.booted);
    await waitForConsoleLog(path.join(tmp, 'data', 'console.log'), 'VMOP-GUEST-READY');
    const guestConsole = await openConsole(
      path.join(tmp, 'run/console-sessions.sock'),
      path.join(tmp, 'client.log'),
    );
    guestConsole.type('poweroff -f');
    await runner.waitForSnapshot(
      (snapshot) => snapshot.phase === 'stopped' && snapshot.lastShutdown?.guest === true,
    );
    await waitGone(booted.qemuPid!);
    guestConsole.close();
    await runner.waitForLog((line) => line.msg?.includes('waiting to be stopped') === true);
    expect(runner!.running()).toBe(true); // still there, waiting
    runner.kill('SIGTERM');
    expect(await runner.exited).toEqual({ code: 0, signal: null });
  });

  it('exits non-zero when qemu crashes', async () => {
    const volume = await ProjectedVolume.create(path.join(tmp, 'etc'), {
      'config.yaml': configYaml(await testGuestConfig({})),
    });
    runner = await startRunner(volume.file('config.yaml'));
    const running = await runner.waitForSnapshot((snapshot) => snapshot.phase === 'booting');
    expect(signalProcess(processRef(running.qemuPid!)!, 'SIGKILL')).toBe(true);
    expect(await runner.exited).toEqual({ code: 1, signal: null });
    expect(runner.snapshots().at(-1), runner.logTail()).toMatchObject({
      phase: 'failed',
      message: expect.stringContaining('killed by SIGKILL'),
    });
  });
});
