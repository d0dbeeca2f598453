import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import type { LogLine } from './manager-process.js';

export interface NodeProcess {
  pid: number;
  /** Every JSON log line of the agent so far (stderr), parsed. */
  logs: LogLine[];
  /** Resolves with the first log line (present or future) that matches. */
  waitForLog(match: (line: LogLine) => boolean, timeoutMs?: number): Promise<LogLine>;
  /** Signals the agent (SIGTERM by default) and resolves with its exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Runs `vmop node` as its own process, as a developer runs it. */
export function startNodeProcess(args: string[]): NodeProcess {
  const child = spawn('bin/vmop', ['node', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  const logs: LogLine[] = [];
  const waiters = new Set<() => void>();
  createInterface({ input: child.stderr! }).on('line', (text) => {
    logs.push(text.startsWith('{') ? (JSON.parse(text) as LogLine) : ({ level: 50, msg: text } as LogLine));
    for (const waiter of waiters) waiter();
  });
  const exited = once(child, 'exit');
  child.once('exit', () => waiters.forEach((waiter) => waiter()));
  const gone = () => child.exitCode !== null || child.signalCode !== null;
  return {
    pid: child.pid!,
    logs,
    waitForLog: (match, timeoutMs = 60_000) =>
      new Promise((resolve, reject) => {
        const check = () => {
          const found = logs.find(match);
          if (!found && !gone()) return;
          waiters.delete(check);
          clearTimeout(timer);
          if (found) resolve(found);
          else
            reject(
              new Error(
                `vmop node exited; last lines:\n${logs
                  .slice(-20)
                  .map((l) => JSON.stringify(l))
                  .join('\n')}`,
              ),
            );
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`no matching vmop node log line within ${timeoutMs} ms`));
        }, timeoutMs);
        waiters.add(check);
        check();
      }),
    async stop(signal = 'SIGTERM') {
      if (!gone()) child.kill(signal);
      const [code] = await exited;
      return code as number | null;
    },
  };
}
