// The host processes of a node's pods, as a test on this machine sees them. Beds run side by side,
// so a process is found below its node's cgroup root, never machine-wide.
import { readdir, readFile } from 'node:fs/promises';

/** Host pids below `cgroupRoot` whose NUL-separated argv passes `matches`. */
export async function nodePids(cgroupRoot: string, matches: (argv: string) => boolean): Promise<number[]> {
  const found: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const argv = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    if (!matches(argv)) continue;
    const cgroups = await readFile(`/proc/${entry}/cgroup`, 'utf8').catch(() => '');
    if (cgroups.includes(`${cgroupRoot}/`)) found.push(Number(entry));
  }
  return found;
}

/** The host pid of the VM's qemu among the processes of a node (below its cgroup root). */
export async function qemuPid(vm: string, cgroupRoot: string): Promise<number | undefined> {
  const [pid] = await nodePids(
    cgroupRoot,
    (argv) => argv.startsWith('/usr/bin/qemu-system-x86_64\0') && argv.includes(`\0guest=${vm},`),
  );
  return pid;
}

/** The host pids of runners on a node. */
export const runnerPids = (cgroupRoot: string) =>
  nodePids(cgroupRoot, (argv) => /\0runner\0--config\0/.test(argv));
