// Runs a pod's container process the way a container runtime would, minus the image: in its own
// mount namespace, with the pod's volumes bound onto their mount paths and a private /dev that holds
// the host device nodes qemu needs plus the pod's block volumes. The rest of the host's file system
// stays visible (there is no image to hold a root file system), /tmp included: runners read host
// paths such as the image repository, which may well lie below /tmp.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, existsSync, openSync } from 'node:fs';
import path from 'node:path';

/** A host path bound onto a path inside the namespace. */
export interface BindMount {
  source: string;
  target: string;
  readOnly?: boolean;
}

export interface LaunchSpec {
  argv: string[];
  env: Record<string, string>;
  /** The working directory inside the namespace. */
  cwd: string;
  /** stdout and stderr are appended here. */
  logPath: string;
  /** An empty host directory where the private /dev is assembled before it is moved onto /dev. */
  devStagingDir: string;
  /** Volumes mounted as directories (or files), e.g. ConfigMaps and Filesystem PVCs. */
  mounts: BindMount[];
  /** Block volumes: backing files (or device nodes) bound onto their device paths. */
  devices: BindMount[];
  /** Host device nodes to carry into the private /dev (only those that exist are bound). */
  hostDevices?: string[];
}

/** What qemu and the runner use; kvm and net/tun only when the host has them. */
export const DEFAULT_HOST_DEVICES = [
  '/dev/null',
  '/dev/zero',
  '/dev/full',
  '/dev/random',
  '/dev/urandom',
  '/dev/tty',
  '/dev/kvm',
  '/dev/net/tun',
];

/*
 * A fixed script that reads its operations from its arguments (up to "--"), then execs the rest.
 * Paths are data, never shell text, so no path can inject a command.
 *   bind SRC DST      bind-mounts SRC onto DST, creating DST (a directory or an empty file, as SRC is)
 *   ro DST            remounts the bind mount at DST read-only
 *   tmpfs DST OPTS    mounts a tmpfs at DST
 *   devpts DST        mounts a new devpts instance at DST (its own ptmx)
 *   symlink TO LINK   creates LINK pointing to TO
 *   move SRC DST      moves the mount at SRC (with its submounts) to DST
 *   cd DIR            the working directory for the process
 */
const SETUP_SCRIPT = `
set -e
while [ "$1" != "--" ]; do
  op=$1
  case $op in
    bind)
      [ -e "$2" ] || { echo "vmop node launcher: $2 does not exist" >&2; exit 1; }
      if [ -d "$2" ]; then mkdir -p "$3"
      else mkdir -p "$(dirname "$3")"; [ -e "$3" ] || : > "$3"; fi
      mount --bind "$2" "$3"; shift 3 ;;
    ro) mount -o remount,bind,ro "$2"; shift 2 ;;
    tmpfs) mkdir -p "$2"; mount -t tmpfs -o "$3" tmpfs "$2"; shift 3 ;;
    devpts) mkdir -p "$2"; mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$2"; shift 2 ;;
    symlink) ln -s "$2" "$3"; shift 3 ;;
    move) mount --move "$2" "$3"; shift 3 ;;
    cd) cd "$2"; shift 2 ;;
    *) echo "vmop node launcher: unknown operation $op" >&2; exit 127 ;;
  esac
done
shift
exec "$@"
`;

const depth = (target: string) => path.normalize(target).split('/').filter(Boolean).length;
const byDepth = (a: BindMount, b: BindMount) => depth(a.target) - depth(b.target);

/**
 * The operations that set up the namespace, in order: the private /dev (assembled in the staging
 * directory, then moved), then the volume mounts, parents before children. Read-only remounts come
 * last, so a mount point nested in a read-only volume can still be created.
 */
export function namespaceSetup(spec: LaunchSpec, hostDeviceExists: (device: string) => boolean): string[] {
  const stage = spec.devStagingDir;
  const inStage = (devicePath: string) => path.join(stage, path.relative('/dev', devicePath));
  const underDev = (target: string) => !path.relative('/dev', target).startsWith('..');
  const ops: string[][] = [['tmpfs', stage, 'mode=755,size=65536k']];
  for (const device of (spec.hostDevices ?? DEFAULT_HOST_DEVICES).filter(hostDeviceExists)) {
    ops.push(['bind', device, inStage(device)]);
  }
  ops.push(
    ['devpts', path.join(stage, 'pts')],
    ['symlink', 'pts/ptmx', path.join(stage, 'ptmx')],
    ['tmpfs', path.join(stage, 'shm'), 'mode=1777'],
    ['symlink', '/proc/self/fd', path.join(stage, 'fd')],
    ['symlink', '/proc/self/fd/0', path.join(stage, 'stdin')],
    ['symlink', '/proc/self/fd/1', path.join(stage, 'stdout')],
    ['symlink', '/proc/self/fd/2', path.join(stage, 'stderr')],
  );
  const devices = [...spec.devices].sort(byDepth);
  for (const device of devices.filter((d) => underDev(d.target))) {
    ops.push(['bind', device.source, inStage(device.target)]);
  }
  ops.push(['move', stage, '/dev']);
  const others = [...spec.mounts, ...devices.filter((d) => !underDev(d.target))].sort(byDepth);
  for (const mount of others) ops.push(['bind', mount.source, mount.target]);
  for (const mount of [...spec.mounts, ...devices].filter((m) => m.readOnly)) ops.push(['ro', mount.target]);
  ops.push(['cd', spec.cwd]);
  return ops.flat();
}

export interface ExitStatus {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface LaunchedProcess {
  pid: number;
  /** Resolves (never rejects) when the main process has exited; what it left behind is killed then. */
  exited: Promise<ExitStatus>;
  hasExited(): boolean;
  /**
   * SIGTERM to the main process (as a runtime signals a container's init), SIGKILL to its whole
   * process group after graceMs; resolves with how the main process ended.
   */
  stop(graceMs: number): Promise<ExitStatus>;
}

/** Kills a process group; it may be gone already. */
function killGroup(pgid: number, signal: NodeJS.Signals) {
  try {
    process.kill(-pgid, signal);
  } catch {
    // ESRCH: nothing left in the group
  }
}

/**
 * Starts the process. It leads its own process group (its children, qemu among them, stay in it),
 * and gets SIGTERM should this process die (setpriv's parent-death signal), so a crashed node agent
 * leaves no runner behind: the runner powers its guest down and exits, and qemu dies with it.
 */
export async function launch(spec: LaunchSpec): Promise<LaunchedProcess> {
  const setup = namespaceSetup(spec, existsSync);
  const fd = openSync(spec.logPath, 'a');
  const child = spawn(
    'setpriv',
    [
      '--pdeathsig',
      'TERM',
      '--',
      'unshare',
      '--mount',
      '--propagation',
      'private',
      '--',
      'sh',
      '-c',
      SETUP_SCRIPT,
      'vmop-node-launcher',
      ...setup,
      '--',
      ...spec.argv,
    ],
    { detached: true, stdio: ['ignore', fd, fd], env: spec.env, cwd: '/' },
  );
  closeSync(fd);
  const failed = once(child, 'error').then(([err]) => err as Error);
  const problem = await Promise.race([once(child, 'spawn').then(() => undefined), failed]);
  if (problem) throw new Error(`could not start ${spec.argv[0]}: ${problem.message}`);
  const pid = child.pid!;
  const hasExited = () => child.exitCode !== null || child.signalCode !== null;
  const exited = once(child, 'exit').then(([code, signal]) => {
    killGroup(pid, 'SIGKILL');
    return { code: code as number | null, signal: signal as NodeJS.Signals | null };
  });
  return {
    pid,
    exited,
    hasExited,
    async stop(graceMs) {
      if (!hasExited()) child.kill('SIGTERM');
      const timer = setTimeout(() => killGroup(pid, 'SIGKILL'), graceMs);
      const status = await exited;
      clearTimeout(timer);
      return status;
    },
  };
}
