import { z } from 'zod';

export const DEFAULT_QUEUE_NAME = 'vmop';

/** A work key: `<kind>:<namespace>/<name>` (or `<kind>:<name>` for cluster-scoped objects). */
export const WorkKeySchema = z
  .string()
  .regex(/^[a-z][a-z0-9-]*:\S+$/, 'a work key looks like <kind>:<namespace>/<name>, e.g. vm:default/test');

/** Name of the jobs the cluster-wide resync schedule produces; never a valid work key (no colon). */
export const RESYNC_JOB_NAME = 'resync';
export const RESYNC_SCHEDULER_ID = 'vmop-resync';

/** Redis keys vmop keeps next to BullMQ's own (`bull:<queue>:*`). */
export function vmopRedisKeys(queueName: string) {
  return {
    /** Sorted set: work key → epoch ms of its earliest requested run (requeueAfter, delayed adds, backoff). */
    followUps: `vmop:${queueName}:follow-ups`,
    /** Hash: work key → JSON failure record while the key's last run failed. */
    failures: `vmop:${queueName}:failures`,
  };
}
