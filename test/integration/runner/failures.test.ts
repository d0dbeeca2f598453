import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { RunnerConfigInput } from '../../../src/api/runner-config.js';
import {
  configYaml,
  makeImageRepository,
  makeTempDir,
  pidsWithArgument,
  startRunner,
  waitGone,
  type RunnerProcess,
} from './harness.js';

const fakeQemu = fileURLToPath(new URL('./fake/fake-qemu.ts', import.meta.url));
const tsxLoader = fileURLToPath(new URL('../../../node_modules/tsx/dist/loader.mjs', import.meta.url));

describe('runner: bad input and failures', () => {
  let tmp: string;
  let runner: RunnerProcess | undefined;

  beforeEach(async () => {
    tmp = await makeTempDir('runner-failures');
  });
  afterEach(async () => {
    await runner?.stop();
    runner = undefined;
    await rm(tmp, { recursive: true, force: true });
  });

  const writeConfig = async (config: RunnerConfigInput | string) => {
    const file = path.join(tmp, 'config.yaml');
    await writeFile(file, typeof config === 'string' ? config : configYaml(config));
    return file;
  };
  const settings = (vm: Partial<RunnerConfigInput['/Runner']['vm']> = {}): RunnerConfigInput['/Runner'] => ({
    dataDir: path.join(tmp, 'data'),
    runtimeDir: path.join(tmp, 'run'),
    template: 'test-guest.liquid',
    imageRepository: path.join(tmp, 'images'),
    vm: { name: 'failing', maximumRam: '256Mi', network: [], ...vm },
  });
  const errorMessages = (process: RunnerProcess) =>
    process.logs.filter((line) => line.level >= 50).map((line) => line.msg ?? '');

  it('rejects an invalid config with the field path and exit code 2', async () => {
    runner = await startRunner(
      await writeConfig(
        '"/Runner":\n  vm:\n    name: bad\n    currentCpus: two\n    drives: [{type: floppy}]\n',
      ),
    );
    expect((await runner.exited).code).toBe(2);
    const message = errorMessages(runner).join('\n');
    expect(message).toContain('"/Runner".vm.currentCpus: expected number, received string');
    expect(message).toContain('"/Runner".vm.drives[0].type:');
  });

  it('exits 2 when the config file does not exist', async () => {
    runner = await startRunner(path.join(tmp, 'missing.yaml'));
    expect((await runner.exited).code).toBe(2);
    expect(errorMessages(runner).join('\n')).toContain('cannot read the config file');
  });

  it('says clearly that qemu is missing', async () => {
    const emptyPath = path.join(tmp, 'bin');
    await mkdir(emptyPath);
    runner = await startRunner(await writeConfig({ '/Runner': settings() }), {
      env: { ...process.env, PATH: emptyPath },
    });
    expect((await runner.exited).code).toBe(1);
    expect(runner.snapshots().at(-1), runner.logTail()).toMatchObject({
      phase: 'failed',
      message: expect.stringMatching(/^qemu executable not found: tried qemu-system-x86_64 \(PATH=.*\/bin\)/),
    });
  });

  it('reports a template that does not exist as a config error of the template field', async () => {
    runner = await startRunner(
      await writeConfig({ '/Runner': { ...settings(), template: 'no-such.liquid' } }),
    );
    expect((await runner.exited).code).toBe(1);
    expect(runner.snapshots().at(-1), runner.logTail()).toMatchObject({
      phase: 'failed',
      configError: { field: 'template', message: expect.stringContaining('"no-such.liquid" not found') },
    });
  });

  it('whenStartFails waitForRetry: a start failure keeps the runner, reporting startFailed, until SIGTERM', async () => {
    const drives = [{ type: 'raw' as const, file: path.join(tmp, 'no-such-disk.img') }];
    runner = await startRunner(
      await writeConfig({ '/Runner': { ...settings({ drives }), whenStartFails: 'waitForRetry' } }),
    );
    const failed = await runner.waitForSnapshot((snapshot) => snapshot.phase === 'failed');
    expect(failed).toMatchObject({ startFailed: true, message: expect.stringContaining('no-such-disk.img') });
    await runner.waitForLog((line) => line.msg?.includes('the operator retries after its back-off') === true);
    expect(runner!.running()).toBe(true); // still there, waiting
    runner.kill('SIGTERM');
    expect(await runner.exited).toEqual({ code: 1, signal: null });
  });

  it('reports a CD image that does not exist as a config error of its drive, before qemu starts', async () => {
    await makeImageRepository(path.join(tmp, 'images'));
    const drives = [
      { type: 'ide-cd' as const, file: '' },
      { type: 'ide-cd' as const, file: 'missing.iso' },
    ];
    runner = await startRunner(await writeConfig({ '/Runner': settings({ drives }) }));
    expect((await runner.exited).code).toBe(1);
    expect(runner.snapshots().at(-1), runner.logTail()).toMatchObject({
      phase: 'failed',
      configError: {
        field: 'vm.drives[1].file',
        message: `CD image ${path.join(tmp, 'images', 'missing.iso')} does not exist`,
      },
    });
    expect(runner.logs.some((line) => line.msg === 'starting qemu')).toBe(false);
  });

  it('logs a garbage QMP line and keeps running, and gives qemu the environment of its template (fake QMP peer: real qemu never sends garbage)', async () => {
    const templates = path.join(tmp, 'templates');
    await mkdir(templates);
    await writeFile(
      path.join(templates, 'fake-qemu.liquid'),
      `qemu:\n  executable: ${JSON.stringify(process.execPath)}\n` +
        `  arguments: ${JSON.stringify(['--import', tsxLoader, fakeQemu, '{{ monitorSocket }}'])}\n` +
        `  environment: {FAKE_QEMU_MARK: "{{ vm.name }}-from-the-template"}\n`,
    );
    runner = await startRunner(
      await writeConfig({ '/Runner': { ...settings(), template: 'fake-qemu.liquid' } }),
      {
        env: { ...process.env, VMOP_TEMPLATE_PATH: templates },
      },
    );
    await runner.waitForSnapshot((snapshot) => snapshot.phase === 'booting');
    expect(
      runner.logs.filter((line) => line.msg === 'skipping a QMP line that is not JSON').length,
    ).toBeGreaterThan(3);
    // The template's `environment` reached the process (on top of the runner's own).
    await runner.waitForLog((line) => line.msg === 'FAKE_QEMU_MARK=failing-from-the-template');

    runner.kill('SIGTERM');
    expect(await runner.exited).toEqual({ code: 0, signal: null });
    expect(runner.snapshots().at(-1), runner.logTail()).toMatchObject({
      phase: 'stopped',
      lastShutdown: { guest: true },
    });
  });

  it('leaves nothing behind when stopped during start', async () => {
    await makeImageRepository(path.join(tmp, 'images'));
    runner = await startRunner(await writeConfig({ '/Runner': settings({ useTpm: true }) }));
    await runner.waitForLog((line) => line.msg === 'starting qemu');
    expect(await pidsWithArgument(tmp)).not.toEqual([]);
    runner.kill('SIGTERM');
    await runner.exited;
    expect(runner.snapshots().at(-1), runner.logTail()).toMatchObject({ phase: 'stopped' });
    expect(await runner.exited).toEqual({ code: 0, signal: null });
    expect(await pidsWithArgument(tmp)).toEqual([]);
  });

  it('takes qemu and swtpm along when the runner itself is killed with SIGKILL', async () => {
    await makeImageRepository(path.join(tmp, 'images'));
    runner = await startRunner(await writeConfig({ '/Runner': settings({ useTpm: true }) }));
    const { qemuPid } = await runner.waitForSnapshot((snapshot) => snapshot.phase === 'booting');
    const swtpmPids = await pidsWithArgument(`dir=${path.join(tmp, 'data', 'swtpm')}`);
    expect(swtpmPids).toHaveLength(1);
    runner.kill('SIGKILL');
    await runner.exited;
    await waitGone(qemuPid!);
    await waitGone(swtpmPids[0]!);
  });
});
