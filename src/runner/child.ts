import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import type { Logger } from '../util/logger.js';
import { findExecutable } from './executable.js';

export interface ChildExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface Child {
  name: string;
  pid: number;
  /** Resolves (never rejects) when the process has exited. */
  exited: Promise<ChildExit>;
  hasExited(): boolean;
  /** The last lines the process wrote to stderr, for error messages. */
  stderrTail(): string;
  /**
   * The first stderr line (kept, or still to come) that `pattern` matches; undefined when the
   * process's stderr ends or `timeoutMs` passes without one.
   */
  stderrLine(pattern: RegExp, timeoutMs: number): Promise<string | undefined>;
  kill(signal: NodeJS.Signals): void;
  /** SIGTERM, SIGKILL after graceMs; resolves once the process is gone. */
  stop(graceMs: number): Promise<ChildExit>;
}

const STDERR_LINES_KEPT = 20;

/**
 * Starts a supervised process whose output is logged line by line. When `setpriv` is available the
 * process gets a parent-death signal, so it dies with the runner even if the runner is SIGKILLed.
 * It runs in a session of its own: a hang-up or Ctrl-C meant for the runner's process group never
 * reaches it, and only the runner (its parent, by its handle) signals it.
 */
export async function spawnChild(
  name: string,
  executable: string,
  args: string[],
  options: { logger: Logger; searchPath?: string; environment?: Record<string, string> },
): Promise<Child> {
  const setpriv = findExecutable(['setpriv'], options.searchPath);
  const [command, argv] = setpriv
    ? [setpriv, ['--pdeathsig', 'KILL', '--', executable, ...args]]
    : [executable, args];
  const child = spawn(command, argv, {
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...options.environment },
  });
  const spawned = once(child, 'spawn').then(() => undefined);
  const failed = once(child, 'error').then(([err]) => err as Error);
  const problem = await Promise.race([spawned, failed]);
  if (problem) throw new Error(`${name} (${executable}) could not start: ${problem.message}`);

  const logger = options.logger.child({ process: name, childPid: child.pid });
  child.on('error', (err) => logger.warn({ err }, `${name}: process error`));
  const stderrLines: string[] = [];
  createInterface({ input: child.stdout! }).on('line', (line) => logger.info({ stream: 'stdout' }, line));
  const stderr = createInterface({ input: child.stderr! });
  stderr.on('line', (line) => {
    stderrLines.push(line);
    if (stderrLines.length > STDERR_LINES_KEPT) stderrLines.shift();
    logger.info({ stream: 'stderr' }, line);
  });
  let stderrClosed = false;
  stderr.once('close', () => (stderrClosed = true));
  const stderrLine = (pattern: RegExp, timeoutMs: number) =>
    new Promise<string | undefined>((resolve) => {
      const kept = stderrLines.find((line) => pattern.test(line));
      if (kept !== undefined || stderrClosed) return resolve(kept);
      const done = (line?: string) => {
        clearTimeout(timer);
        stderr.off('line', onLine);
        stderr.off('close', onClose);
        resolve(line);
      };
      const onLine = (line: string) => pattern.test(line) && done(line);
      const onClose = () => done();
      const timer = setTimeout(done, timeoutMs);
      stderr.on('line', onLine);
      stderr.once('close', onClose);
    });
  const exited = once(child, 'exit').then(([code, signal]) => {
    const exit = { code: code as number | null, signal: signal as NodeJS.Signals | null };
    logger.info({ ...exit }, `${name} exited`);
    return exit;
  });
  const hasExited = () => child.exitCode !== null || child.signalCode !== null;
  return {
    name,
    pid: child.pid!,
    exited,
    hasExited,
    stderrTail: () => stderrLines.join('\n'),
    stderrLine,
    kill: (signal) => {
      if (!hasExited()) child.kill(signal);
    },
    async stop(graceMs) {
      if (!hasExited()) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      const exit = await exited;
      clearTimeout(timer);
      return exit;
    },
  };
}
