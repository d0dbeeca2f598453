// The serial log with real qemu: kept in the data directory (the runner-data volume in a pod),
// cut back while qemu writes to it, and still there, with a new run's marker, after the runner
// process is replaced.
import { readFile, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { RunnerConfigInput } from '../../../src/api/runner-config.js';
import { RUN_MARKER_PREFIX, SERIAL_LOG_LIMIT_BYTES } from '../../../src/runner/serial-log.js';
import { eventually } from '../../support/eventually.js';
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

const LINES = 30_000; // about 170 KB of output, more than the limit

describe('runner: the serial log', () => {
  let tmp: string;
  let runner: RunnerProcess | undefined;
  const logFile = () => path.join(tmp, 'data', 'console.log');
  const markers = (log: string) => log.split(RUN_MARKER_PREFIX).length - 1;

  beforeEach(async () => {
    tmp = await makeTempDir('runner-serial-log');
    configFile = undefined;
  });
  afterEach(async () => {
    await runner?.stop();
    runner = undefined;
    await rm(tmp, { recursive: true, force: true });
  });

  let configFile: string | undefined;
  const start = async () => {
    if (!configFile) {
      const config: RunnerConfigInput = {
        '/Runner': {
          dataDir: path.join(tmp, 'data'),
          runtimeDir: path.join(tmp, 'run'),
          template: 'test-guest.liquid',
          imageRepository: await makeImageRepository(path.join(tmp, 'images')),
          vm: { name: 'serial', maximumRam: '256Mi', network: [{ type: 'user' }], powerdownTimeout: 30 },
        },
      };
      const volume = await ProjectedVolume.create(path.join(tmp, 'etc'), {
        'config.yaml': configYaml(config),
      });
      configFile = volume.file('config.yaml');
    }
    runner = await startRunner(configFile);
    return runner.waitForSnapshot((snapshot) => snapshot.phase === 'booting' || snapshot.phase === 'running');
  };

  it('is cut back to its limit while the guest writes, and outlives the runner', async () => {
    const first = await start();
    await waitForConsoleLog(logFile(), 'VMOP-GUEST-READY');
    expect(await readFile(logFile(), 'utf8')).toContain(`${RUN_MARKER_PREFIX}${first.runId} started at `);

    // The command is typed through a console session, which ends before the output comes. Then the
    // runner, whose console hub reads QEMU's console, stops for a while: QEMU (7.2 to 10) logged a
    // character twice whenever its reader was late (`163323` where `16323` was due) while it wrote
    // the log itself.
    const guestConsole = await openConsole(
      path.join(tmp, 'run', 'console-sessions.sock'),
      path.join(tmp, 'client.log'),
    );
    guestConsole.type(`sleep 2; seq 1 ${LINES}; echo seq-$((6*7))-done`);
    await sleep(1_000); // typed, and echoed before the first line comes
    guestConsole.close();
    runner!.kill('SIGSTOP');
    await sleep(4_000);
    runner!.kill('SIGCONT');
    await waitForConsoleLog(logFile(), 'seq-42-done', 120_000);
    // The runner looks every few seconds; until then the file may be larger.
    const trimmed = await eventually(async () => {
      const log = await readFile(logFile(), 'utf8');
      expect(log).toMatch(new RegExp(`\\n${LINES}\\r?\\n`));
      expect((await stat(logFile())).size).toBeLessThanOrEqual(SERIAL_LOG_LIMIT_BYTES);
      return log;
    }, 60_000);
    expect(trimmed).not.toContain('\0'); // qemu appends: no hole where the cut-away part was
    expect(trimmed).not.toContain(RUN_MARKER_PREFIX); // the run's start was cut away with the rest
    const lines = trimmed.slice(0, trimmed.indexOf('seq-42-done')).split(/\r?\n/);
    expect(lines[0]).toMatch(/^\d+$/); // cut at a line start
    const firstNumber = Number(lines[0]);
    // Every line once, none lost or doubled while the reader was stopped or the log was cut back.
    expect(lines.slice(0, LINES - firstNumber + 1)).toEqual(
      Array.from({ length: LINES - firstNumber + 1 }, (_, i) => String(firstNumber + i)),
    );

    runner!.kill('SIGTERM');
    expect(await runner!.exited).toMatchObject({ code: 0 });
    runner = undefined;

    const second = await start();
    expect(second.runId).not.toBe(first.runId);
    await eventually(async () => {
      const log = await readFile(logFile(), 'utf8');
      const secondRun = log.indexOf(`${RUN_MARKER_PREFIX}${second.runId} started at `);
      expect(secondRun).toBeGreaterThan(log.indexOf(`\n${LINES}`)); // the first run's output stays, before it
      expect(log.slice(secondRun)).toContain('VMOP-GUEST-READY');
      expect(markers(log)).toBe(1);
    }, 120_000);
  });
});
