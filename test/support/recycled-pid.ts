// A pid recycled on purpose, for tests of whoever signals processes they recorded earlier (issue 52):
// an unrelated process is given a pid that a process of the code under test had, and must be left
// alone. The kernel hands out the pid after /proc/sys/kernel/ns_last_pid next, so no test waits for
// pids to wrap.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { isRunning, processRef, type ProcessRef } from '../../src/util/process.js';

/** Records every catchable signal it gets in `log`, one name a line; runs until SIGKILL. */
const BYSTANDER = `
const [log] = process.argv.slice(1);
for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP', 'SIGUSR1', 'SIGUSR2', 'SIGQUIT'])
  process.on(signal, () => require('node:fs').appendFileSync(log, signal + '\\n'));
require('node:fs').writeFileSync(log, '');
setInterval(() => undefined, 60_000);
`;

export interface Bystander {
  ref: ProcessRef;
  /** Still running (SIGKILL leaves no line). */
  running(): boolean;
  /** The signals it got and survived, in order. */
  signals(): string[];
  stop(): Promise<void>;
}

async function startBystander(child: ChildProcess, log: string): Promise<Bystander> {
  const ref = processRef(child.pid!)!;
  // Its handlers are in place once it has written its (empty) log.
  for (let waited = 0; waited < 10_000; waited += 20) {
    try {
      readFileSync(log);
      break;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
  return {
    ref,
    running: () => isRunning(ref),
    signals: () => readFileSync(log, 'utf8').split('\n').filter(Boolean),
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGKILL');
        await once(child, 'exit');
      }
    },
  };
}

/**
 * A process that takes `pid` (free now: its earlier holder exited) and logs the signals it gets;
 * undefined when another process has taken the pid first and holds it (pids wrap fast on a busy
 * machine with pid_max 32768), so the caller frees another pid and asks again.
 */
export async function bystanderWithPid(pid: number, log: string): Promise<Bystander | undefined> {
  for (let attempt = 0; attempt < 200; attempt++) {
    if (existsSync(`/proc/${pid}`)) return undefined;
    writeFileSync('/proc/sys/kernel/ns_last_pid', String(pid - 1));
    const child = spawn(process.execPath, ['-e', BYSTANDER, log], { stdio: 'ignore' });
    if (child.pid === pid) return startBystander(child, log);
    // Another process took it first (the machine is busy): again.
    child.kill('SIGKILL');
    await once(child, 'exit');
  }
  throw new Error(`pid ${pid} could not be given to a bystander`);
}

/** A process that logs the signals it gets, with whatever pid it gets. */
export async function bystander(log: string): Promise<Bystander> {
  return startBystander(spawn(process.execPath, ['-e', BYSTANDER, log], { stdio: 'ignore' }), log);
}
