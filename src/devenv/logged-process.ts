import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, openSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { describeExit } from '../util/process.js';

export interface LoggedProcess {
  name: string;
  pid: number;
  logPath: string;
  /** Resolves (never rejects) with how the process ended. */
  exited: Promise<string>;
  hasExited(): boolean;
  /** The last lines of the log file, for error messages. */
  logTail(lines?: number): Promise<string>;
  /** SIGTERM, SIGKILL after graceMs, and resolves once the process is gone. */
  stop(graceMs: number): Promise<void>;
}

/** Starts a binary with stdout and stderr appended to logPath (not piped, so output can never block it). */
export async function spawnLogged(
  name: string,
  binary: string,
  args: string[],
  logPath: string,
  /** More environment (secrets that must not show in the process list). */
  env: Record<string, string> = {},
): Promise<LoggedProcess> {
  const fd = openSync(logPath, 'a');
  const child = spawn(binary, args, { stdio: ['ignore', fd, fd], env: { ...process.env, ...env } });
  closeSync(fd);
  if (child.pid === undefined) {
    const [err] = (await once(child, 'error')) as [Error];
    throw new Error(`${name} (${binary}) could not start: ${err.message}`);
  }
  const exited = once(child, 'exit').then(([code, signal]) =>
    describeExit({ code: code as number | null, signal: signal as NodeJS.Signals | null }),
  );
  const hasExited = () => child.exitCode !== null || child.signalCode !== null;
  return {
    name,
    pid: child.pid,
    logPath,
    exited,
    hasExited,
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
