import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, openSync } from 'node:fs';
import { access, constants, readFile } from 'node:fs/promises';
import path from 'node:path';
import { childRef, describeExit, type ProcessRef } from '../util/process.js';
import type { ProcessGroup } from './process-group.js';

export interface LoggedProcess {
  name: string;
  pid: number;
  /** The pid and start time, for whoever signals it from another process (`vmop dev`'s state). */
  ref: ProcessRef;
  logPath: string;
  /** Resolves (never rejects) with how the process ended. */
  exited: Promise<string>;
  hasExited(): boolean;
  /** Sends `signal` unless it has exited (its parent's handle: never another process). */
  kill(signal: NodeJS.Signals): void;
  /** The last lines of the log file, for error messages. */
  logTail(lines?: number): Promise<string>;
  /** SIGTERM, SIGKILL after graceMs, and resolves once the process is gone. */
  stop(graceMs: number): Promise<void>;
}

export interface SpawnLoggedOptions {
  /** More environment (secrets that must not show in the process list). */
  env?: Record<string, string>;
  /** The process group it runs in (it and what it starts), stopped as one should the owner die. */
  group?: ProcessGroup;
}

/** Starts a binary with stdout and stderr appended to logPath (not piped, so output can never block it). */
export async function spawnLogged(
  name: string,
  binary: string,
  args: string[],
  logPath: string,
  options: SpawnLoggedOptions = {},
): Promise<LoggedProcess> {
  // In a group, a shell joins it and then becomes the binary: one that cannot run must fail here,
  // as a spawn of its own would, not as a shell's exit code later.
  if (options.group) await assertExecutable(binary);
  const command = options.group ? options.group.command(binary, args) : { binary, args };
  const fd = openSync(logPath, 'a');
  const child = spawn(command.binary, command.args, {
    stdio: ['ignore', fd, fd],
    env: { ...process.env, ...options.env },
  });
  closeSync(fd);
  if (child.pid === undefined) {
    const [err] = (await once(child, 'error')) as [Error];
    throw new Error(`${name} (${binary}) could not start: ${err.message}`);
  }
  // Now, before this process can have handled the child's exit: the pid is still the child's.
  const ref = childRef(child.pid);
  const exited = once(child, 'exit').then(([code, signal]) =>
    describeExit({ code: code as number | null, signal: signal as NodeJS.Signals | null }),
  );
  const hasExited = () => child.exitCode !== null || child.signalCode !== null;
  return {
    name,
    pid: child.pid,
    ref,
    logPath,
    exited,
    hasExited,
    kill: (signal) => {
      if (!hasExited()) child.kill(signal);
    },
    async logTail(lines = 40) {
      const text = await readFile(logPath, 'utf8').catch(() => '');
      return text.trimEnd().split('\n').slice(-lines).join('\n');
    },
    async stop(graceMs) {
      if (hasExited()) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Throws as spawn() would when `binary` (a path, or a name on PATH) cannot be run. */
async function assertExecutable(binary: string): Promise<void> {
  const candidates = binary.includes('/')
    ? [binary]
    : (process.env.PATH ?? '').split(':').map((dir) => path.join(dir || '.', binary));
  for (const candidate of candidates) {
    if (
      await access(candidate, constants.X_OK).then(
        () => true,
        () => false,
      )
    )
      return;
  }
  throw new Error(`${binary} could not start: spawn ${binary} ENOENT`);
}
