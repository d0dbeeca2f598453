// What a local cluster may leave on this machine: its processes, mounts, loop devices, cgroups,
// network namespaces, its interface and container log links, found by what it made (its
// directories and names, so two clusters running side by side are told apart); and the machine's
// own rules and forwarding, which it must leave as they were.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readdir, readFile, readlink } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
/** A tool's stdout; a tool that fails fails the caller (an empty answer would make checks vacuous). */
const stdoutOf = async (command: string, args: string[]) => (await run(command, args)).stdout;

/** What a cluster made on this machine, to look for. */
export interface Footprint {
  /** Its directories (absolute): processes naming them, mounts and loop devices below them. */
  dirs: string[];
  /** Its network namespaces (`ip netns` names). */
  namespaces: string[];
  /** This machine's interface into its network. */
  hostInterface: string;
  /** Its nodes' cgroup roots (e.g. `/vmop-3-1`): their pods' processes are below them. */
  cgroupRoots: string[];
  /** Its process groups' cgroups (absolute): every other process it started is in one. */
  processGroups: string[];
}

export async function machineTraces(footprint: Footprint) {
  const { dirs, namespaces, hostInterface, cgroupRoots, processGroups } = footprint;
  const below = (file: string | undefined) => dirs.some((dir) => file?.startsWith(`${dir}/`));
  const processes: string[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const argv = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    const cgroup = await readFile(`/proc/${entry}/cgroup`, 'utf8').catch(() => '');
    if (dirs.some((dir) => argv.includes(dir)) || cgroupRoots.some((root) => cgroup.includes(`:${root}/`)))
      processes.push(`${entry} ${argv.replaceAll('\0', ' ')}`);
  }
  for (const group of processGroups) {
    const members = await readFile(path.join(group, 'cgroup.procs'), 'utf8').catch(() => '');
    for (const pid of members.split('\n').filter(Boolean)) processes.push(`${pid} in ${group}`);
  }
  const hierarchies = await readdir('/sys/fs/cgroup');
  const listedNetns = (await stdoutOf('ip', ['netns', 'list'])).split('\n').map((line) => line.split(' ')[0]);
  const links = (await stdoutOf('ip', ['-o', 'link', 'show'])).split('\n');
  const containerLogs: string[] = [];
  for (const name of await readdir('/var/log/containers').catch(() => [])) {
    const target = await readlink(path.join('/var/log/containers', name)).catch(() => '');
    if (below(target)) containerLogs.push(name);
  }
  return {
    processes,
    mounts: (await readFile('/proc/self/mountinfo', 'utf8'))
      .split('\n')
      .filter((line) => below(line.split(' ')[4])),
    loops: (await stdoutOf('losetup', ['--list', '--noheadings', '--output', 'BACK-FILE']))
      .split('\n')
      .map((file) => file.trim())
      .filter(below),
    cgroups: [
      ...hierarchies.flatMap((hierarchy) =>
        cgroupRoots.filter((root) => existsSync(path.join('/sys/fs/cgroup', hierarchy, root))),
      ),
      ...processGroups.filter((group) => existsSync(group)),
    ],
    netns: namespaces.filter((name) => listedNetns.includes(name)),
    interfaces: links.filter((line) => line.includes(` ${hostInterface}@`)),
    containerLogs,
    // The machine's own: a cluster's rules and forwarding live in its namespaces only.
    iptables: (await stdoutOf('iptables-save', [])).split('\n').filter((line) => !/^[#:]/.test(line)),
    forwarding: (await readFile('/proc/sys/net/ipv4/ip_forward', 'utf8')).trim(),
  };
}
export type MachineTraces = Awaited<ReturnType<typeof machineTraces>>;

/** What a stopped cluster left: empty lists, and the machine's own as they were before it. */
export function leftBehind(before: MachineTraces, after: MachineTraces) {
  return {
    ...after,
    iptables: after.iptables.join('\n') === before.iptables.join('\n') ? 'as before' : after.iptables,
    forwarding: after.forwarding === before.forwarding ? 'as before' : after.forwarding,
  };
}

/** leftBehind() of a cluster that left nothing behind. */
export const NOTHING_LEFT = {
  processes: [],
  mounts: [],
  loops: [],
  cgroups: [],
  netns: [],
  interfaces: [],
  containerLogs: [],
  iptables: 'as before',
  forwarding: 'as before',
};
