import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdir, mkdtemp, readdir, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launch, type LaunchSpec } from '../../../src/node/runtime/launcher.js';
import { eventually } from '../../support/eventually.js';
import { isAlive } from '../runner/harness.js';

describe('vmop node launcher (real mount namespaces, real processes)', () => {
  let tmp: string;
  /** Mount points the namespace creates on the host (there is no image root): one unique tree. */
  const mountRoot = `/run/vmop-launcher-test-${randomBytes(4).toString('hex')}`;

  beforeAll(async () => {
    tmp = await mkdtemp(path.join(os.tmpdir(), 'vmop-launcher-'));
  });
  afterAll(async () => {
    await rm(tmp, { recursive: true, force: true });
    await rm(mountRoot, { recursive: true, force: true });
  });

  const spec = async (name: string, argv: string[], extra: Partial<LaunchSpec> = {}): Promise<LaunchSpec> => {
    const dir = path.join(tmp, name);
    await mkdir(path.join(dir, 'dev'), { recursive: true });
    return {
      argv,
      env: { PATH: process.env.PATH ?? '' },
      cwd: '/',
      logPath: path.join(dir, 'log'),
      devStagingDir: path.join(dir, 'dev'),
      mounts: [],
      devices: [],
      ...extra,
    };
  };
  const sh = (script: string) => ['sh', '-c', script];
  /** Resolves once the namespace is set up and `pid` runs the launched shell script. */
  const launchedScript = (pid: number) =>
    eventually(async () =>
      expect((await readFile(`/proc/${pid}/cmdline`, 'utf8')).startsWith('sh\0-c\0trap')).toBe(true),
    );

  it('shows the process its volumes at their paths and a private /dev with its disks', async () => {
    const config = path.join(tmp, 'config');
    const data = path.join(tmp, 'data');
    const disk = path.join(tmp, 'disk.img');
    await mkdir(config);
    await mkdir(data);
    await writeFile(path.join(config, 'config.yaml'), 'hello\n');
    await writeFile(disk, 'DISK');
    await truncate(disk, 4096);
    const script = [
      `cat ${mountRoot}/config/config.yaml`,
      `(echo x > ${mountRoot}/config/new) 2>/dev/null && echo config-writable || echo config-read-only`,
      `echo written > ${mountRoot}/data/file && echo data-writable`,
      'head -c 4 /dev/system-disk; echo',
      'echo discarded > /dev/null && echo null-works',
      'ls /dev | tr "\\n" " "; echo',
      'pwd',
    ].join('; ');
    const launched = await launch(
      await spec('volumes', sh(script), {
        cwd: `${mountRoot}/data`,
        mounts: [
          { source: config, target: `${mountRoot}/config`, readOnly: true },
          { source: data, target: `${mountRoot}/data` },
        ],
        devices: [{ source: disk, target: '/dev/system-disk' }],
      }),
    );
    expect(await launched.exited).toEqual({ code: 0, signal: null });
    const lines = (await readFile(path.join(tmp, 'volumes/log'), 'utf8')).trim().split('\n');
    expect(lines.slice(0, 5)).toEqual(['hello', 'config-read-only', 'data-writable', 'DISK', 'null-works']);
    const devices = lines[5]!.trim().split(' ');
    expect(devices).toEqual(
      expect.arrayContaining(['null', 'zero', 'urandom', 'pts', 'ptmx', 'shm', 'system-disk']),
    );
    expect(devices).not.toContain('vda'); // the host's disks stay outside
    expect(lines[6]).toBe(`${mountRoot}/data`);
    expect(await readFile(path.join(data, 'file'), 'utf8')).toBe('written\n');
    // The mounts were the namespace's own: on the host the mount points are empty directories.
    expect(await readdir(`${mountRoot}/config`)).toEqual([]);
    expect(await readdir(path.join(tmp, 'volumes/dev'))).toEqual([]);
  });

  it('fails with the reason in the log when a volume source is missing', async () => {
    const launched = await launch(
      await spec('missing', ['true'], {
        mounts: [{ source: path.join(tmp, 'nowhere'), target: `${mountRoot}/x` }],
      }),
    );
    expect((await launched.exited).code).not.toBe(0);
    expect(await readFile(path.join(tmp, 'missing/log'), 'utf8')).toContain(
      `${path.join(tmp, 'nowhere')} does not exist`,
    );
  });

  it('kills what the process left behind when it exits', async () => {
    const pidFile = path.join(tmp, 'left-behind.pid');
    const launched = await launch(await spec('leftover', sh(`sleep 1000 & echo $! > ${pidFile}; exit 3`)));
    expect(await launched.exited).toEqual({ code: 3, signal: null });
    const orphan = Number(await readFile(pidFile, 'utf8'));
    await eventually(() => expect(isAlive(orphan)).toBe(false));
  });

  it('stops with SIGTERM, and with SIGKILL when the grace period runs out', async () => {
    const polite = await launch(await spec('polite', sh('trap "exit 0" TERM; while :; do sleep 0.05; done')));
    await launchedScript(polite.pid);
    expect(await polite.stop(10_000)).toEqual({ code: 0, signal: null });
    const stubborn = await launch(await spec('stubborn', sh('trap "" TERM; while :; do sleep 0.05; done')));
    await launchedScript(stubborn.pid);
    expect(await stubborn.stop(300)).toEqual({ code: null, signal: 'SIGKILL' });
  });

  it('sends SIGTERM to the process when the node agent dies', async () => {
    const marker = path.join(tmp, 'got-term');
    const fixture = path.join(import.meta.dirname, 'fixtures/launch-and-wait.ts');
    const fixtureDir = path.join(tmp, 'fixture');
    await mkdir(fixtureDir);
    const agent = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        fixture,
        fixtureDir,
        ...sh(`trap "echo term > ${marker}; exit 0" TERM; while :; do sleep 0.05; done`),
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const [line] = (await once(createInterface({ input: agent.stdout! }), 'line')) as [string];
    const launched = Number(line);
    await launchedScript(launched);
    agent.kill('SIGKILL');
    await eventually(async () => expect(await readFile(marker, 'utf8')).toBe('term\n'));
    await eventually(() => expect(isAlive(launched)).toBe(false));
  });
});
