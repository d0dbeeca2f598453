import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type RedisServer } from '../../../src/devenv/redis.js';
import { openWorkQueue, startWorkers, type WorkQueue } from '../../../src/queue/index.js';
import { QueueInspector } from '../../../src/queue/inspect/inspector.js';

async function value(registry: Registry, name: string, labels: Record<string, string> = {}): Promise<number> {
  // Histograms report `<name>_count` and friends as samples of the metric `<name>`.
  const metric = (await registry.getMetricsAsJSON()).find(
    (m) => name === m.name || name.startsWith(`${m.name}_`),
  );
  const sample = metric?.values.find(
    (v) =>
      ((v as { metricName?: string }).metricName ?? metric.name) === name &&
      Object.entries(labels).every(([k, l]) => (v.labels as Record<string, unknown>)[k] === l),
  );
  return sample?.value ?? NaN;
}

describe('work queue metrics', () => {
  let redis: RedisServer;
  let registry: Registry;
  let producer: WorkQueue;
  let inspector: QueueInspector;
  let workers: { close(): Promise<void> };
  let release: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const started = new Set<string>();

  beforeAll(async () => {
    redis = await startRedis();
    registry = new Registry();
    producer = openWorkQueue({ redisUrl: redis.url, metrics: registry });
    inspector = new QueueInspector({ redisUrl: redis.url });
    workers = await startWorkers({
      redisUrl: redis.url,
      metrics: registry,
      // The failure below is intended; its warning would only clutter the test output.
      logger: pino({ level: 'silent' }),
      backoff: { baseMs: 50, capMs: 50 },
      handler: async (key, ctx) => {
        started.add(key);
        if (key === 'vm:metrics/held') await held;
        if (key === 'vm:metrics/flaky' && (await ctx.attempt()) === 1) throw new Error('first attempt fails');
      },
    });
  });
  afterAll(async () => {
    release?.();
    await workers?.close();
    await producer?.close();
    await inspector?.close();
    await redis?.stop();
  });

  it('exposes depth by state, adds, retries, handler duration, latency and the longest-running handler', async () => {
    await inspector.pause();
    await producer.addMany(['vm:metrics/a', 'vm:metrics/b', 'vm:metrics/flaky']);
    await producer.add('vm:metrics/later', { delayMs: 60_000 });
    expect(await value(registry, 'vmop_queue_depth', { state: 'waiting' })).toBe(3);
    expect(await value(registry, 'vmop_queue_depth', { state: 'follow-up' })).toBe(1);
    // The oldest waiting key's age: paused, it only grows.
    const waited = await value(registry, 'vmop_queue_oldest_waiting_seconds');
    await new Promise((r) => setTimeout(r, 1100));
    expect(await value(registry, 'vmop_queue_oldest_waiting_seconds')).toBeGreaterThanOrEqual(waited + 1);
    expect(await value(registry, 'vmop_queue_redis_up')).toBe(1);
    await inspector.resume();

    await producer.add('vm:metrics/held');
    // Until the held key is the only one running and nothing else is queued (flaky's retry may
    // still be running when nothing waits any more: a loaded machine once saw two active).
    const onlyHeldRuns = async () => {
      const rows = (await inspector.list()).filter((row) => row.state !== 'scheduled'); // 'later', due in a minute
      return rows.length === 1 && rows[0]!.key === 'vm:metrics/held' && rows[0]!.state === 'active';
    };
    while (!started.has('vm:metrics/held') || !(await onlyHeldRuns())) {
      await new Promise((r) => setTimeout(r, 20));
    }
    await new Promise((r) => setTimeout(r, 50));
    expect(await value(registry, 'vmop_queue_longest_running_handler_seconds')).toBeGreaterThan(0);
    expect(await value(registry, 'vmop_queue_depth', { state: 'active' })).toBe(1);
    release();
    while ((await inspector.list(['active'])).length > 0) await new Promise((r) => setTimeout(r, 20));

    expect(await value(registry, 'vmop_queue_adds_total', { mode: 'immediate' })).toBe(4);
    expect(await value(registry, 'vmop_queue_adds_total', { mode: 'delayed' })).toBe(1);
    expect(await value(registry, 'vmop_queue_retries_total')).toBe(1);
    const durations = { outcome: 'success' };
    // a, b, flaky (second attempt) and held succeeded; flaky's first attempt failed.
    expect(await value(registry, 'vmop_queue_handler_duration_seconds_count', durations)).toBe(4);
    expect(await value(registry, 'vmop_queue_handler_duration_seconds_count', { outcome: 'error' })).toBe(1);
    expect(await value(registry, 'vmop_queue_enqueue_to_start_seconds_count')).toBe(5);
    expect(await value(registry, 'vmop_queue_longest_running_handler_seconds')).toBe(0);
  });
});
