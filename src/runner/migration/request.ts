// What the manager asks of a runner for a live migration: an annotation on its pod, which the
// runner reads from a downward API file (kubelet rewrites it when the pod changes, so the
// manager's nudge brings it at once). Markers in the runner's data directory say, across a
// restarted runner, that the guest left this pod (source) or arrived in it (target).
import { existsSync } from 'node:fs';
import { readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';

/** The annotation on the runner pod (its value is JSON). */
export const MIGRATION_ANNOTATION = 'vmoperator.jdrupes.org/migration';

export const MigrationRequest = z.object({
  id: z.string().regex(/^[a-z0-9-]{1,40}$/),
  role: z.enum(['source', 'target']),
  /** For the target: the source's side channel, `host:port`. */
  source: z.string().optional(),
  /** For the source: host files (devices) of the disks to copy to the target (not shared). */
  mirror: z.array(z.string()).default([]),
  /** For the source: give up (the manager's deadline passed, or the target went away). */
  abort: z.boolean().optional(),
});
export type MigrationRequest = z.infer<typeof MigrationRequest>;

/**
 * The request in a downward API annotations file (`key="value"` lines, values quoted as Go's %q,
 * which JSON reads for what vmop writes); undefined when there is none or it does not parse.
 */
export async function readMigrationRequest(file: string | undefined): Promise<MigrationRequest | undefined> {
  if (!file) return undefined;
  const text = await readFile(file, 'utf8').catch(() => '');
  const line = text.split('\n').find((l) => l.startsWith(`${MIGRATION_ANNOTATION}=`));
  if (!line) return undefined;
  try {
    const value = JSON.parse(line.slice(MIGRATION_ANNOTATION.length + 1)) as string;
    const parsed = MigrationRequest.safeParse(JSON.parse(value));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/** `migrated-<id>`: the guest left this runner's QEMU (the source passed the point of no return). */
export const leftMarker = (dataDir: string, id: string) => path.join(dataDir, `migration-${id}.left`);
/** `arrived-<id>`: the guest runs in the target's QEMU; a restarted target boots it afresh. */
export const arrivedMarker = (dataDir: string, id: string) => path.join(dataDir, `migration-${id}.arrived`);

export const hasMarker = (file: string) => existsSync(file);
export const setMarker = (file: string) => writeFile(file, new Date().toISOString(), { flush: true });
export const clearMarker = (file: string) => rm(file, { force: true });

/**
 * What a starting runner is in a migration its pod's annotation names: the source the guest left
 * (`left`: it must start nothing), the target the guest is still to come to (`incoming`), or
 * neither (a target the guest arrived in boots it afresh).
 */
export async function roleAtStart(
  podInfoFile: string | undefined,
  dataDir: string,
): Promise<{ left?: string; incoming?: MigrationRequest }> {
  const request = await readMigrationRequest(podInfoFile);
  if (request?.role === 'source' && hasMarker(leftMarker(dataDir, request.id))) return { left: request.id };
  if (request?.role === 'target' && !hasMarker(arrivedMarker(dataDir, request.id)))
    return { incoming: request };
  return {};
}
