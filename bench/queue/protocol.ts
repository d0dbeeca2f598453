import { z } from 'zod';

export const QUEUE_NAME = 'bench';

/** How a bench worker process is started (JSON in BENCH_WORKER). */
export const BenchWorkerConfigSchema = z.object({
  mode: z.enum(['vmop', 'plain']),
  redisUrl: z.string(),
  concurrency: z.number().int().positive(),
});
export type BenchWorkerConfig = z.infer<typeof BenchWorkerConfigSchema>;

/** Parent → worker over IPC. */
export const BenchCommandSchema = z.enum(['report', 'stop']);

/**
 * Worker → parent: `ready`, then on `report` the handler start times ([key or item index, epoch
 * ms]) and the CPU time the process used since it was ready.
 */
export const BenchMessageSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('ready') }),
  z.object({
    type: z.literal('report'),
    starts: z.array(z.tuple([z.string(), z.number()])),
    cpuMs: z.number(),
  }),
]);
export type BenchMessage = z.infer<typeof BenchMessageSchema>;
