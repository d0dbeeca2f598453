// Processes named by pid and start time. A pid alone names whatever process holds it now: pids are
// recycled within minutes on a busy machine (issue 52: a reaper's TERM reached another bed's QEMU).
// Whoever records a pid to signal it later records its start time too, and signals only while
// /proc still shows that start time (or holds the process's handle, as its parent).
import { readFileSync } from 'node:fs';
import { z } from 'zod';

/** How a process ended, for logs and messages: "killed by SIGKILL" or "exit code 1". */
export function describeExit(exit: { code: number | null; signal: NodeJS.Signals | null }): string {
  return exit.signal ? `killed by ${exit.signal}` : `exit code ${String(exit.code)}`;
}

/** A process as recorded: its pid and its start time (clock ticks after boot), which a recycled pid does not share. */
export const ProcessRef = z.object({
  pid: z.number().int().positive(),
  startTime: z.number().int().nonnegative(),
});
export type ProcessRef = z.infer<typeof ProcessRef>;

interface ProcStat {
  state: string;
  startTime: number;
}

/** /proc/PID/stat's state and start time (field 22); the command name may hold spaces and parentheses. */
export function parseProcStat(text: string): ProcStat | undefined {
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  // fields[0] is field 3 (state), so field 22 is fields[19].
  const startTime = Number(fields[19]);
  if (!fields[0] || !Number.isSafeInteger(startTime)) return undefined;
  return { state: fields[0], startTime };
}

function readProcStat(pid: number): ProcStat | undefined {
  try {
    return parseProcStat(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return undefined;
  }
}

/**
 * The process that has `pid` now, for a later signal. Read it where the pid cannot have been
 * recycled yet: in the parent before it handled the child's exit (the same tick as spawn), or
 * right after finding the process.
 */
export function processRef(pid: number): ProcessRef | undefined {
  const stat = readProcStat(pid);
  return stat && { pid, startTime: stat.startTime };
}

/** Whether the recorded process still runs (not exited, not a zombie, its pid not recycled). */
export function isRunning(ref: ProcessRef): boolean {
  const stat = readProcStat(ref.pid);
  return stat !== undefined && stat.startTime === ref.startTime && stat.state !== 'Z';
}

/**
 * Sends `signal` to the recorded process if it is still that process; false (and nothing sent) when
 * it is gone or its pid now names another one.
 */
export function signalProcess(ref: ProcessRef, signal: NodeJS.Signals): boolean {
  if (!isRunning(ref)) return false;
  try {
    process.kill(ref.pid, signal);
    return true;
  } catch {
    return false;
  }
}

/** processRef() of a child spawned in this same tick: its pid cannot have been recycled yet. */
export function childRef(pid: number): ProcessRef {
  const ref = processRef(pid);
  if (!ref) throw new Error(`process ${pid} has no /proc entry right after it was spawned`);
  return ref;
}
