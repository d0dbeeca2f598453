import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { Logger } from '../util/logger.js';

const SECONDS_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

// A registry may be shared by a producer and the workers of one process: reuse what is registered.
function registered<T>(registry: Registry, name: string, create: () => T): T {
  return (registry.getSingleMetric(name) as T | undefined) ?? create();
}

/** Counts adds made by this process. */
export function addsCounter(registry: Registry): Counter<'mode'> {
  return registered(
    registry,
    'vmop_queue_adds_total',
    () =>
      new Counter({
        name: 'vmop_queue_adds_total',
        help: 'Keys added to the work queue by this process (mode: immediate or delayed)',
        labelNames: ['mode'],
        registers: [registry],
      }),
  );
}

export interface WorkerMetricSources {
  /** Cluster-wide counts by state, read from Redis at scrape time. */
  depth(): Promise<Record<string, number>>;
  /** Seconds the oldest handler running in this process has been running (0 when idle). */
  longestRunningSeconds(): number;
  /** Seconds the oldest key waiting for a worker has waited (0 when none waits), cluster-wide. */
  oldestWaitingSeconds(): Promise<number>;
  /** Whether Redis takes a write now (it is up, and a master). */
  redisWritable(): Promise<boolean>;
  logger: Logger;
}

export interface WorkerMetrics {
  retries: Counter;
  handlerDuration: Histogram<'outcome'>;
  enqueueToStart: Histogram;
}

export function workerMetrics(registry: Registry, sources: WorkerMetricSources): WorkerMetrics {
  registered(
    registry,
    'vmop_queue_depth',
    () =>
      new Gauge({
        name: 'vmop_queue_depth',
        help: 'Keys in the work queue by state (waiting, active, follow-up, failed), cluster-wide',
        labelNames: ['state'],
        registers: [registry],
        async collect() {
          try {
            for (const [state, count] of Object.entries(await sources.depth())) this.set({ state }, count);
          } catch (err) {
            sources.logger.warn({ err }, 'could not read queue depth for metrics');
          }
        },
      }),
  );
  registered(
    registry,
    'vmop_queue_oldest_waiting_seconds',
    () =>
      new Gauge({
        name: 'vmop_queue_oldest_waiting_seconds',
        help: 'How long the oldest key waiting for a worker has waited (0: none waits), cluster-wide',
        registers: [registry],
        async collect() {
          try {
            this.set(await sources.oldestWaitingSeconds());
          } catch (err) {
            sources.logger.warn({ err }, 'could not read the oldest waiting key for metrics');
          }
        },
      }),
  );
  registered(
    registry,
    'vmop_queue_redis_up',
    () =>
      new Gauge({
        name: 'vmop_queue_redis_up',
        help: "1 while the queue's Redis takes writes (up, and a master), else 0",
        registers: [registry],
        async collect() {
          this.set((await sources.redisWritable().catch(() => false)) ? 1 : 0);
        },
      }),
  );
  registered(
    registry,
    'vmop_queue_longest_running_handler_seconds',
    () =>
      new Gauge({
        name: 'vmop_queue_longest_running_handler_seconds',
        help: 'How long the longest-running handler in this process has been running',
        registers: [registry],
        collect() {
          this.set(sources.longestRunningSeconds());
        },
      }),
  );
  return {
    retries: registered(
      registry,
      'vmop_queue_retries_total',
      () =>
        new Counter({
          name: 'vmop_queue_retries_total',
          help: 'Handler failures that scheduled a retry with backoff',
          registers: [registry],
        }),
    ),
    handlerDuration: registered(
      registry,
      'vmop_queue_handler_duration_seconds',
      () =>
        new Histogram({
          name: 'vmop_queue_handler_duration_seconds',
          help: 'Handler run time by outcome (success, error, terminal, aborted)',
          labelNames: ['outcome'],
          buckets: SECONDS_BUCKETS,
          registers: [registry],
        }),
    ),
    enqueueToStart: registered(
      registry,
      'vmop_queue_enqueue_to_start_seconds',
      () =>
        new Histogram({
          name: 'vmop_queue_enqueue_to_start_seconds',
          help: 'Time from a job becoming runnable to its handler starting',
          buckets: SECONDS_BUCKETS,
          registers: [registry],
        }),
    ),
  };
}
