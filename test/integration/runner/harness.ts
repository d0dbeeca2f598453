import { execFile, spawn } from 'node:child_process';
import { mkdir, mkdtemp, readlink, rename, rm, symlink, truncate, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { stringify as toYaml } from 'yaml';
import type { RunnerConfigInput } from '../../../src/api/runner-config.js';
import { RunnerSnapshot } from '../../../src/api/runner-snapshot.js';
import { ensureTestGuest } from '../../../src/devenv/test-guest.js';
import { vmopNodeArgs } from '../../../src/devenv/vmop-bin.js';
import { isRunning, processRef, signalProcess, type ProcessRef } from '../../../src/util/process.js';
import { openConsole, waitForConsoleLog } from '../../support/qemu.js';

export { openConsole, waitForConsoleLog };

const run = promisify(execFile);
const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));

export const MiB = 1024 * 1024;
/** Generous: several TCG guests may boot at once on two cores. */
export const BOOT_TIMEOUT_MS = 120_000;

export async function makeTempDir(prefix: string): Promise<string> {
  return mkdtemp(path.join(os.tmpdir(), `vmop-${prefix}-`));
}

/** A sparse raw disk image of `bytes`, empty (made anew if it exists). */
export async function makeEmptyDisk(file: string, bytes: number): Promise<string> {
  await writeFile(file, '');
  await truncate(file, bytes);
  return file;
}

/** An image repository with the test guest's boot files (as `test-guest/`) and small ISO images. */
export async function makeImageRepository(dir: string, discs: string[] = []): Promise<string> {
  await mkdir(dir, { recursive: true });
  await symlink((await ensureTestGuest()).dir, path.join(dir, 'test-guest'));
  for (const disc of discs) {
    const content = path.join(dir, `.${disc}-content`);
    await mkdir(content);
    await writeFile(path.join(content, 'id.txt'), `disc-${disc}\n`);
    await run('genisoimage', ['-quiet', '-r', '-V', disc, '-o', path.join(dir, `${disc}.iso`), content]);
  }
  return dir;
}

/**
 * A directory laid out like a ConfigMap/Secret volume as kubelet writes it: the files live in a
 * timestamped directory, `..data` points to it, and each file name is a symlink through `..data`.
 * An update writes a new timestamped directory and swaps `..data` atomically (rename of a symlink).
 */
export class ProjectedVolume {
  private generation = 0;
  private files: Record<string, string> = {};

  private constructor(readonly dir: string) {}

  static async create(dir: string, files: Record<string, string>): Promise<ProjectedVolume> {
    await mkdir(dir, { recursive: true });
    const volume = new ProjectedVolume(dir);
    await volume.update(files);
    return volume;
  }

  file(name: string): string {
    return path.join(this.dir, name);
  }

  /** Changes some files; like kubelet, writes a complete new version with all of them. */
  async update(changes: Record<string, string>): Promise<void> {
    const files = { ...this.files, ...changes };
    this.files = files;
    const data = path.join(this.dir, '..data');
    const previous = await readlink(data).catch(() => undefined);
    const version = `..${new Date().toISOString().replace(/[-:.]/g, '_')}.${++this.generation}`;
    await mkdir(path.join(this.dir, version));
    for (const [name, text] of Object.entries(files))
      await writeFile(path.join(this.dir, version, name), text);
    await symlink(version, path.join(this.dir, '..data_tmp'));
    await rename(path.join(this.dir, '..data_tmp'), data);
    for (const name of Object.keys(changes)) {
      await symlink(path.join('..data', name), this.file(name)).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'EEXIST') throw err;
      });
    }
    if (previous) await rm(path.join(this.dir, previous), { recursive: true, force: true });
  }
}

export function configYaml(config: RunnerConfigInput): string {
  return toYaml(config);
}

export interface LogLine {
  level: number;
  msg?: string;
  [key: string]: unknown;
}

/** A `vmop runner` process started from source; its JSON log lines are collected from stderr. */
export interface RunnerProcess {
  pid: number;
  logs: LogLine[];
  /** Its exit; rejects with its last log lines if it has not exited within BOOT_TIMEOUT_MS of the ask. */
  readonly exited: Promise<RunnerExit>;
  waitForLog(predicate: (line: LogLine) => boolean, timeoutMs?: number): Promise<LogLine>;
  /** The snapshots a stand-alone runner logged, in order. */
  snapshots(): RunnerSnapshot[];
  /** Its last log lines, for an assertion's message: what it did before ending as it did. */
  logTail(): string;
  waitForSnapshot(
    predicate: (snapshot: RunnerSnapshot) => boolean,
    timeoutMs?: number,
  ): Promise<RunnerSnapshot>;
  kill(signal: NodeJS.Signals): void;
  /** Whether it has not exited yet. */
  running(): boolean;
  /** SIGKILL if still running (its children die with it), then waits. */
  stop(): Promise<void>;
}

export interface RunnerExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** `promise`, or a rejection saying `what()` once `timeoutMs` have passed. */
async function within<T>(promise: Promise<T>, timeoutMs: number, what: () => string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(what())), timeoutMs);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

async function poll<T>(
  what: string,
  probe: () => T | undefined,
  timeoutMs: number,
  context: () => string,
  gone: () => boolean = () => false,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = probe();
    if (found !== undefined) return found;
    if (gone()) throw new Error(`${what}: the runner has exited\n${context()}`);
    if (Date.now() > deadline) throw new Error(`${what} within ${timeoutMs} ms\n${context()}`);
    await sleep(50);
  }
}

export async function startRunner(
  configPath: string,
  options: { env?: NodeJS.ProcessEnv; args?: string[] } = {},
): Promise<RunnerProcess> {
  // As bin/vmop runs it (the transpiled CLI while it is fresh, else tsx), without a PATH of its own.
  const child = spawn(
    process.execPath,
    [...vmopNodeArgs(), 'runner', '-c', configPath, ...(options.args ?? [])],
    {
      cwd: repoRoot,
      env: options.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  const logs: LogLine[] = [];
  let rest = '';
  child.stdout.resume();
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    const lines = (rest + chunk).split('\n');
    rest = lines.pop()!;
    for (const line of lines) {
      try {
        logs.push(JSON.parse(line) as LogLine);
      } catch {
        logs.push({ level: 50, msg: line });
      }
    }
  });
  // 'close', not 'exit': only then has all of its stderr (its last snapshot) been read.
  const closed = new Promise<RunnerExit>((resolve) =>
    child.once('close', (code, signal) => resolve({ code, signal })),
  );
  await new Promise((resolve, reject) => child.once('spawn', resolve).once('error', reject));
  const logTail = () =>
    logs
      .slice(-30)
      .map((line) => JSON.stringify(line).slice(0, 400))
      .join('\n');
  const gone = () => child.exitCode !== null || child.signalCode !== null;
  const snapshots = () =>
    logs.filter((line) => line.msg === 'VM state changed').map((line) => RunnerSnapshot.parse(line.snapshot));
  return {
    pid: child.pid!,
    logs,
    // A runner that does not exit fails its test with what it was doing, not with a bare timeout.
    get exited() {
      return within(closed, BOOT_TIMEOUT_MS - 10_000, () => `the runner has not exited\n${logTail()}`);
    },
    waitForLog: (predicate, timeoutMs = BOOT_TIMEOUT_MS) =>
      poll('no such log line', () => logs.find(predicate), timeoutMs, logTail, gone),
    snapshots,
    logTail,
    waitForSnapshot: (predicate, timeoutMs = BOOT_TIMEOUT_MS) =>
      poll('no such snapshot', () => snapshots().find(predicate), timeoutMs, logTail, gone),
    kill: (signal) => {
      if (!gone()) child.kill(signal);
    },
    running: () => !gone(),
    stop: async () => {
      if (!gone()) child.kill('SIGKILL');
      await closed;
    },
  };
}

export { isRunning, processRef, signalProcess };

/** Waits until the process is gone (a process the runner started is reaped by the runner). */
export async function waitGone(process: number | ProcessRef, timeoutMs = 15_000): Promise<void> {
  // A pid is taken as the process that has it now: one that is gone already stays gone.
  const ref = typeof process === 'number' ? processRef(process) : process;
  if (!ref) return;
  await poll(
    `process ${ref.pid} still alive`,
    () => (isRunning(ref) ? undefined : true),
    timeoutMs,
    () => '',
  );
}

/** Pids of processes whose command line contains `text`. */
export async function pidsWithArgument(text: string): Promise<number[]> {
  const { stdout } = await run('pgrep', ['-f', '--', text]).catch(() => ({ stdout: '' }));
  return stdout
    .split('\n')
    .filter(Boolean)
    .map(Number)
    .filter((pid) => pid !== process.pid);
}
