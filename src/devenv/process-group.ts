// A group of processes that is stopped as one, never by pids: a cgroup (v2) of its own. Every
// process the group starts is a member, and so is everything a member starts. Should the group's
// owner die in any way (even SIGKILL), a reaper kills the cgroup (`cgroup.kill`), runs a clean-up
// script and removes a directory. No pid is recorded, so none can be stale: a process that left
// the group by exiting is simply not in it any more (issue 52).
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { mkdir, readFile, rm, rmdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../util/logger.js';

export interface ProcessGroup {
  /** The group's cgroup directory. */
  readonly cgroup: string;
  /** What to spawn so that `binary args` runs in the group (it joins before it execs). */
  command(binary: string, args: readonly string[]): { binary: string; args: string[] };
  /** Whether any process is in the group. */
  populated(): Promise<boolean>;
  /**
   * Ends the group after its owner stopped its processes: kills whatever is still in it, removes
   * the cgroup, and ends the reaper without it running the clean-up.
   */
  release(): Promise<void>;
}

/** Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup/unified` in a hybrid layout). */
export function cgroup2Mount(mountinfo = readFileSync('/proc/self/mountinfo', 'utf8')): string {
  for (const line of mountinfo.split('\n')) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL…] - FSTYPE SOURCE SUPER
    const [before, after] = line.split(' - ');
    if (after?.split(' ')[0] === 'cgroup2') return before!.split(' ')[4]!;
  }
  throw new Error(
    'no cgroup v2 hierarchy is mounted: local environments need one (cgroup2 in /proc/self/mountinfo)',
  );
}

/*
 * A detached shell that reads a pipe whose other end only the owner holds. When the owner dies, the
 * kernel closes the pipe, `read` sees end-of-file, and the shell kills the cgroup, waits for it to
 * empty, removes it, runs the clean-up script and removes the directory.
 */
const REAPER_SCRIPT = `
while read -r _; do :; done
cg=$1
if [ -d "$cg" ]; then
  echo 1 > "$cg/cgroup.kill"
  i=0
  while [ $i -lt 100 ] && grep -q '^populated 1' "$cg/cgroup.events"; do sleep 0.1; i=$((i + 1)); done
  rmdir "$cg"
fi
[ -z "$3" ] || sh "$3"
# Never remove a directory with something still mounted below it: rm would delete through the mount.
[ -z "$2" ] || awk -v dir="$2/" 'index($5, dir) == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo || rm -rf "$2"
`;

/** Joins the cgroup named by $0, then becomes the command. */
const JOIN_SCRIPT = 'echo 0 > "$0/cgroup.procs" && exec "$@"';

const POPULATED = /^populated 1$/m;

/**
 * Makes a cgroup for `name`'s processes and a reaper that, should this process die, kills them,
 * runs `cleanupScript` (a file) and removes `removeDir`.
 */
export async function startProcessGroup(options: {
  name: string;
  removeDir?: string;
  cleanupScript?: string;
  logger: Logger;
}): Promise<ProcessGroup> {
  const cgroup = path.join(cgroup2Mount(), `vmop-${options.name}-${randomBytes(4).toString('hex')}`);
  await mkdir(cgroup);
  const reaper = spawn(
    'sh',
    [
      '-c',
      REAPER_SCRIPT,
      'process-group-reaper',
      cgroup,
      options.removeDir ?? '',
      options.cleanupScript ?? '',
    ],
    // Its own session: a Ctrl-C aimed at the owner's process group must not take the reaper down first.
    { detached: true, stdio: ['pipe', 'ignore', 'ignore'] },
  );
  const reaperExited = once(reaper, 'exit');
  reaper.stdin.on('error', (err) => options.logger.warn({ err }, 'process group reaper pipe failed'));
  const populated = async () => POPULATED.test(await readFile(path.join(cgroup, 'cgroup.events'), 'utf8'));
  let released: Promise<void> | undefined;
  return {
    cgroup,
    command: (binary, args) => ({ binary: 'sh', args: ['-c', JOIN_SCRIPT, cgroup, binary, ...args] }),
    populated,
    release: () =>
      (released ??= (async () => {
        if (await populated()) {
          options.logger.info({ cgroup }, 'killing what is left of the process group');
          await writeFile(path.join(cgroup, 'cgroup.kill'), '1');
          for (let waited = 0; waited < 10_000 && (await populated()); waited += 50) await sleep(50);
        }
        await rmdir(cgroup).catch((err: unknown) =>
          options.logger.warn({ err, cgroup }, 'cannot remove the process group'),
        );
        // Our own child, so its pid is still its own. SIGKILL: closing its stdin would set it off.
        if (reaper.exitCode === null && reaper.signalCode === null) reaper.kill('SIGKILL');
        await reaperExited;
        reaper.stdin.destroy();
      })()),
  };
}

/** Removes `dir`, but refuses while anything is mounted below it (rm would delete through the mount). */
export async function removeUnmountedDir(dir: string): Promise<void> {
  const mountinfo = await readFile('/proc/self/mountinfo', 'utf8');
  const mounted = mountinfo.split('\n').filter((line) => line.split(' ')[4]?.startsWith(`${dir}/`));
  if (mounted.length > 0) throw new Error(`not removing ${dir}: ${mounted.length} mounts remain below it`);
  await rm(dir, { recursive: true, force: true });
}
