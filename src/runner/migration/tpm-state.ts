// Where swtpm keeps a migrating guest's TPM state. The source's swtpm locks its state directory
// until it exits, which is after the guest has arrived (swtpm before 0.8, as Debian ships it, has
// no way to let go earlier), so the target's swtpm takes the state QEMU brings into a directory of
// the migration's own. The next cold start of the guest makes the newest arrived state the VM's.
import { readdir, readFile, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { arrivedMarker } from './request.js';

const PREFIX = 'swtpm-migration-';

/** The target's swtpm state directory for migration `id` (on the shared runner data volume). */
export const incomingTpmStateDir = (dataDir: string, id: string) => path.join(dataDir, `${PREFIX}${id}`);

/** swtpm's arguments with its state in `dir` (the templates' `--tpmstate dir=…`). */
export function withTpmStateDir(args: string[], dir: string): string[] {
  return args.map((arg, i) =>
    args[i - 1] === '--tpmstate'
      ? arg
          .split(',')
          .map((option) => (option.startsWith('dir=') ? `dir=${dir}` : option))
          .join(',')
      : arg,
  );
}

/**
 * Before a cold start: the TPM state the guest last arrived with by migration, if any, becomes
 * `stateDir`; the directories of other migrations (older ones, or ones that failed) go.
 * Returns the migration whose state was taken.
 */
export async function adoptArrivedTpmState(dataDir: string, stateDir: string): Promise<string | undefined> {
  const ids = (await readdir(dataDir).catch(() => [] as string[]))
    .filter((name) => name.startsWith(PREFIX))
    .map((name) => name.slice(PREFIX.length));
  if (ids.length === 0) return undefined;
  const arrivedAt = async (id: string) =>
    readFile(arrivedMarker(dataDir, id), 'utf8').then(
      (time) => Date.parse(time),
      () => undefined,
    );
  const arrived: Array<{ id: string; at: number }> = [];
  for (const id of ids) {
    const at = await arrivedAt(id);
    if (at !== undefined && !Number.isNaN(at)) arrived.push({ id, at });
  }
  const newest = arrived.sort((a, b) => b.at - a.at)[0]?.id;
  if (newest) {
    await rm(stateDir, { recursive: true, force: true });
    await rename(incomingTpmStateDir(dataDir, newest), stateDir);
  }
  for (const id of ids.filter((other) => other !== newest))
    await rm(incomingTpmStateDir(dataDir, id), { recursive: true, force: true });
  return newest;
}
