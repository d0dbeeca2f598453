import { z } from 'zod';

/**
 * What a job carries. Only for inspection: handlers get the key (the job name), never this,
 * because they are level-triggered.
 */
export const JobDataSchema = z.object({
  /** The event that triggered the add, e.g. a QMP event a runner published. */
  event: z.unknown().optional(),
  /** `follow-up` when the job was created for a requeueAfter, a delayed add or a retry. */
  source: z.enum(['add', 'follow-up']).default('add'),
});
export type JobData = z.infer<typeof JobDataSchema>;
