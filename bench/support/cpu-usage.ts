// Where a bench's CPU went: the machine's busy cores and each named process's, from /proc (Linux).
import { readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import { procCpuSeconds } from '../../src/runner/metrics/usage.js';

/** User + system CPU seconds of a process so far (/proc/<pid>/stat). */
export const processCpuSeconds = (pid: number): number =>
  procCpuSeconds(readFileSync(`/proc/${pid}/stat`, 'utf8'));

/** Busy CPU seconds of the whole machine so far, all cores together (/proc/stat's first line). */
export function machineBusySeconds(): number {
  const [user, nice, system, _idle, _iowait, irq, softirq, steal] = readFileSync('/proc/stat', 'utf8')
    .split('\n')[0]!
    .trim()
    .split(/\s+/)
    .slice(1)
    .map(Number);
  return (user! + nice! + system! + irq! + softirq! + steal!) / 100;
}

/** Pids of the processes named `comm` whose command line mentions `needle` (e.g. a control plane's directory). */
export function pidsOf(comm: string, needle: string): number[] {
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .filter((pid) => {
      try {
        return (
          readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === comm &&
          readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(needle)
        );
      } catch {
        return false; // gone meanwhile
      }
    })
    .map(Number);
}

export interface CpuShares {
  /** Cores the machine had. */
  cores: number;
  /** How long the counting lasted. */
  seconds: number;
  /** Average cores busy, the whole machine and each group of processes. */
  busy: Record<string, number>;
}

/** Starts counting; the returned function gives the average cores used since, per group and in all. */
export function countCpu(groups: Record<string, () => number[]>): () => CpuShares {
  // A process that died meanwhile (a killed Redis master) counts until its last reading: understated.
  const last = new Map<number, number>();
  const read = (pid: number) => {
    try {
      last.set(pid, processCpuSeconds(pid));
    } catch {
      // gone: keep its last reading
    }
    return last.get(pid) ?? 0;
  };
  const sum = (pids: number[]) => pids.reduce((total, pid) => total + read(pid), 0);
  const pids = Object.fromEntries(Object.entries(groups).map(([name, find]) => [name, find()]));
  const before = Object.fromEntries(Object.entries(pids).map(([name, list]) => [name, sum(list)]));
  const machineBefore = machineBusySeconds();
  const startedAt = performance.now();
  return () => {
    const seconds = (performance.now() - startedAt) / 1000;
    const busy: Record<string, number> = { machine: (machineBusySeconds() - machineBefore) / seconds };
    for (const [name, list] of Object.entries(pids)) busy[name] = (sum(list) - before[name]!) / seconds;
    return { cores: os.availableParallelism(), seconds, busy };
  };
}

/** "1.93 of 2 cores: apiserver 1.10, managers 0.45, …" */
export function describeCpu(shares: CpuShares): string {
  const { machine, ...groups } = shares.busy;
  const parts = Object.entries(groups).map(([name, cores]) => `${name} ${cores.toFixed(2)}`);
  return `${machine!.toFixed(2)} of ${shares.cores} cores: ${parts.join(', ')}`;
}
