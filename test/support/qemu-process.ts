// The host processes of a node's pods, as a test on this machine sees them. Beds run side by side,
// so a process is found below its node's cgroup root, never machine-wide. Each is named by pid and
// start time: a test that signals one later signals it only if it is still that process.
import { readdir, readFile } from 'node:fs/promises';
import { processRef, signalProcess, type ProcessRef } from '../../src/util/process.js';

/** Host processes below `cgroupRoot` whose NUL-separated argv passes `matches`. */
export async function nodeProcesses(
  cgroupRoot: string,
  matches: (argv: string) => boolean,
): Promise<ProcessRef[]> {
  const found: ProcessRef[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const argv = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    if (!matches(argv)) continue;
    const cgroups = await readFile(`/proc/${entry}/cgroup`, 'utf8').catch(() => '');
    if (!cgroups.includes(`${cgroupRoot}/`)) continue;
    const ref = processRef(Number(entry));
    if (ref) found.push(ref);
  }
  return found;
}

/** The VM's qemu among the processes of a node (below its cgroup root). */
export async function qemuProcess(vm: string, cgroupRoot: string): Promise<ProcessRef | undefined> {
  const [qemu] = await nodeProcesses(
    cgroupRoot,
    (argv) => argv.startsWith('/usr/bin/qemu-system-x86_64\0') && argv.includes(`\0guest=${vm},`),
  );
  return qemu;
}

/** The runners on a node. */
export const runnerProcesses = (cgroupRoot: string) =>
  nodeProcesses(cgroupRoot, (argv) => /\0runner\0--config\0/.test(argv));

/** Sends `signal` to a process a test found or a bed recorded; fails if that process is gone. */
export function signalRecorded(ref: ProcessRef, signal: NodeJS.Signals = 'SIGKILL'): void {
  if (!signalProcess(ref, signal)) throw new Error(`pid ${ref.pid} is no longer the process recorded`);
}
