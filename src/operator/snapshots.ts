import type { Redis } from 'ioredis';
import { ImportProgress, importProgressRedisKey } from '../api/import-progress.js';
import { RunnerSnapshot, snapshotRedisKey } from '../api/runner-snapshot.js';
import type { Logger } from '../util/logger.js';

/**
 * Reads a VM's latest runner snapshot (a migration target's: `suffix`, see snapshotRedisKey); a
 * malformed one is logged and treated as absent.
 */
export function snapshotReader(redis: Redis, logger: Logger) {
  return async (key: string, suffix = ''): Promise<RunnerSnapshot | undefined> => {
    const text = await redis.get(snapshotRedisKey(key, suffix));
    if (text === null) return undefined;
    const parsed = RunnerSnapshot.safeParse(JSON.parse(text));
    if (parsed.success) return parsed.data;
    logger.warn({ key, issues: parsed.error.issues.slice(0, 3) }, 'ignoring a malformed runner snapshot');
    return undefined;
  };
}

/** Reads the latest progress of a disk's import (importer/progress.ts); a malformed one counts as absent. */
export function importProgressReader(redis: Redis) {
  return async (key: string, volume: string): Promise<ImportProgress | undefined> => {
    const text = await redis.get(importProgressRedisKey(key, volume));
    return text === null ? undefined : ImportProgress.safeParse(JSON.parse(text)).data;
  };
}
