import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';

export interface LogLine {
  level: number;
  time: number;
  pid: number;
  msg: string;
  key?: string;
  [field: string]: unknown;
}

export interface ManagerProcess {
  child: ChildProcess;
  pid: number;
  /** Every JSON log line so far (stderr), parsed. */
  logs: LogLine[];
  /** Lines on stderr that are not vmop's logs (node's own, e.g. the inspector's address). */
  otherStderr: string[];
  /** Resolves with the first log line (present or future) that matches. */
  waitForLog(match: (line: LogLine) => boolean, timeoutMs?: number): Promise<LogLine>;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Runs `vmop manager` as its own process (as a replica would run), with debug logs unless told. */
export function startManagerProcess(
  args: string[],
  options: {
    logLevel?: string;
    /** More environment, e.g. NODE_OPTIONS=--inspect for the benchmarks. */
    env?: Record<string, string>;
  } = {},
): ManagerProcess {
  const child = spawn('bin/vmop', ['manager', '--metrics-port', '0', ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: {
      ...process.env,
      VMOP_LOG_LEVEL: options.logLevel ?? 'debug',
      ...options.env,
    },
  });
  const logs: LogLine[] = [];
  const otherStderr: string[] = [];
  const waiters = new Set<(line: LogLine) => void>();
  let partial = '';
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    partial += chunk;
    const lines = partial.split('\n');
    partial = lines.pop() ?? '';
    for (const text of lines) {
      if (!text.startsWith('{')) {
        otherStderr.push(text);
        continue;
      }
      const line = JSON.parse(text) as LogLine;
      logs.push(line);
      for (const waiter of waiters) waiter(line);
    }
  });
  const exited = once(child, 'exit');
  return {
    child,
    pid: child.pid!,
    logs,
    otherStderr,
    waitForLog(match, timeoutMs = 60_000) {
      const found = logs.find(match);
      if (found) return Promise.resolve(found);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiters.delete(waiter);
          reject(new Error(`no matching manager log line within ${timeoutMs} ms`));
        }, timeoutMs);
        const waiter = (line: LogLine) => {
          if (!match(line)) return;
          clearTimeout(timer);
          waiters.delete(waiter);
          resolve(line);
        };
        waiters.add(waiter);
      });
    },
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      const [code] = await exited;
      return code as number | null;
    },
  };
}
