import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFile, rm } from 'node:fs/promises';
import type { Logger } from '../util/logger.js';

export interface OrphanReaper {
  /** Puts a process in the reaper's care: it is killed if this process dies without calling release(). */
  adopt(pid: number): void;
  /** Ends the reaper without it touching anything; call once the adopted processes are stopped. */
  release(): Promise<void>;
}

/*
 * A detached shell that reads pids from a pipe whose other end only this process holds. When this
 * process dies in any way (even SIGKILL), the kernel closes the pipe, `read` sees end-of-file, and
 * the shell kills the pids (TERM, then KILL for those still alive after 5 s), runs the clean-up
 * script and removes the directory. No prctl, no polling of the parent: the closed pipe is the signal.
 */
const REAPER_SCRIPT = `
pids=""
while read -r pid; do pids="$pids $pid"; done
[ -z "$pids" ] || kill -TERM $pids 2>/dev/null
i=0
while [ $i -lt 25 ]; do
  alive=""
  for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive=1; done
  [ -n "$alive" ] || break
  sleep 0.2
  i=$((i + 1))
done
[ -z "$pids" ] || kill -KILL $pids 2>/dev/null
[ -z "$2" ] || sh "$2"
# Never remove a directory with something still mounted below it: rm would delete through the mount.
[ -z "$1" ] || awk -v dir="$1/" 'index($5, dir) == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo || rm -rf "$1"
`;

/**
 * Starts a reaper that, should this process die, kills the adopted pids, runs `cleanupScript` (a
 * file) and removes `removeDir`.
 */
export function startOrphanReaper(options: {
  removeDir?: string;
  cleanupScript?: string;
  logger: Logger;
}): OrphanReaper {
  const args = [options.removeDir ?? '', options.cleanupScript ?? ''];
  const reaper = spawn('sh', ['-c', REAPER_SCRIPT, 'orphan-reaper', ...args], {
    // Its own session: a Ctrl-C aimed at this process group must not take the reaper down first.
    detached: true,
    stdio: ['pipe', 'ignore', 'ignore'],
  });
  const exited = once(reaper, 'exit');
  reaper.stdin.on('error', (err) => options.logger.warn({ err }, 'orphan reaper pipe failed'));
  return {
    adopt(pid) {
      reaper.stdin.write(`${pid}\n`);
    },
    async release() {
      if (reaper.exitCode !== null || reaper.signalCode !== null) return;
      // SIGKILL, so it never reaches the kill lines (closing its stdin would trigger them).
      reaper.kill('SIGKILL');
      await exited;
      reaper.stdin.destroy();
    },
  };
}

/** Removes `dir`, but refuses while anything is mounted below it (rm would delete through the mount). */
export async function removeUnmountedDir(dir: string): Promise<void> {
  const mountinfo = await readFile('/proc/self/mountinfo', 'utf8');
  const mounted = mountinfo.split('\n').filter((line) => line.split(' ')[4]?.startsWith(`${dir}/`));
  if (mounted.length > 0) throw new Error(`not removing ${dir}: ${mounted.length} mounts remain below it`);
  await rm(dir, { recursive: true, force: true });
}
