// The host processes of a VM's qemu, as a test on this machine sees them.
import { readdir, readFile } from 'node:fs/promises';

/** The host pid of the VM's qemu among the processes of a node (below its cgroup root). */
export async function qemuPid(vm: string, cgroupRoot: string): Promise<number | undefined> {
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const argv = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    if (!argv.startsWith('/usr/bin/qemu-system-x86_64\0') || !argv.includes(`\0guest=${vm},`)) continue;
    const cgroups = await readFile(`/proc/${entry}/cgroup`, 'utf8').catch(() => '');
    if (cgroups.includes(`${cgroupRoot}/`)) return Number(entry);
  }
  return undefined;
}
