// How a live migration is asked for: an annotation on the VM, written by the operation that asks
// (Migrate, or an Evict of a VM that can move live), read by the VM's reconcile, which carries it
// out and records it in status.migrationState. The runner pods' own annotation (the runner's part)
// is src/runner/migration/request.ts.
import { z } from 'zod';

export const MIGRATE_ANNOTATION = 'vmoperator.jdrupes.org/migrate';
/** On the claims made for a migration's target: the migration (gone once it succeeded). */
export const LABEL_MIGRATION = 'vmoperator.jdrupes.org/migration';

export const VmMigrationRequest = z.object({
  id: z.string().regex(/^[a-z0-9-]{1,40}$/),
  operation: z.string().optional(),
  nodeName: z.string().optional(),
});
export type VmMigrationRequest = z.infer<typeof VmMigrationRequest>;

/** A migration's id from the operation that asks for it (uids are random; 8 hex digits do). */
export const migrationIdOf = (operationUid: string) => `m${operationUid.replaceAll('-', '').slice(0, 8)}`;

export function readVmMigrationRequest(annotations: Record<string, string> | undefined) {
  const value = annotations?.[MIGRATE_ANNOTATION];
  if (!value) return undefined;
  try {
    const parsed = VmMigrationRequest.safeParse(JSON.parse(value));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/** The migration's target pod: the VM's name and the migration's id. */
export const targetPodName = (vmName: string, id: string) => `${vmName}-${id}`;
