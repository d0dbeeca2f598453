// The JSON merge patch of a status (or any object) the reconcilers write, from what they read.
import { PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';

/**
 * A JSON merge patch turning `before` into `after`: fields that went away become null, also within
 * objects (a merge patch merges them: an old migrationState's result would outlive a new one's start).
 */
export function statusPatch<T extends object>(before: T | undefined, after: T): Record<string, unknown> {
  return mergePatchOf((before ?? {}) as Record<string, unknown>, JSON.parse(JSON.stringify(after)));
}

export const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

function mergePatchOf(
  before: Record<string, unknown>,
  after: Record<string, unknown>,
): Record<string, unknown> {
  const patch: Record<string, unknown> = { ...after };
  for (const [key, old] of Object.entries(before)) {
    if (!(key in after)) patch[key] = null;
    else if (isPlainObject(old) && isPlainObject(after[key])) patch[key] = mergePatchOf(old, after[key]);
  }
  return patch;
}

/** The request option that makes a client-node patch call a JSON merge patch. */
export const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
