import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QueueHarness } from './harness.js';

const VMOP = fileURLToPath(new URL('../../../bin/vmop', import.meta.url));

describe('vmop queue', () => {
  let harness: QueueHarness;
  const vmop = async (args: string[], env: Record<string, string | undefined> = {}) => {
    const { stdout } = await promisify(execFile)(VMOP, ['queue', ...args], {
      env: { ...process.env, REDIS_URL: harness.queueRedis.url, VMOP_LOG_LEVEL: 'warn', ...env },
    });
    return stdout;
  };
  const json = async (args: string[]) => JSON.parse(await vmop([...args, '-o', 'json'])) as unknown;

  beforeAll(async () => {
    harness = await QueueHarness.start();
    await harness.spawnWorker({ backoff: { baseMs: 3_600_000, capMs: 3_600_000 } });
    await harness.setBehaviour('vm:cli/broken', { terminal: true });
    await harness.setBehaviour('vm:cli/flaky', { failTimes: 1 });
    await harness.producer.addMany(['vm:cli/broken', 'vm:cli/flaky']);
    await harness.producer.add('vm:cli/later', { delayMs: 3_600_000 });
    await harness.waitFor('both failures', async () => (await harness.runs()).length === 2);
  });
  afterAll(async () => {
    await harness?.stop();
  });

  it('pauses the queue and shows counts by state', async () => {
    expect(await vmop(['pause'])).toContain('paused');
    await harness.producer.add('vm:cli/waiting', { event: { event: 'SHUTDOWN', data: { guest: true } } });
    expect(await json(['stats'])).toMatchObject({
      queue: 'vmop',
      paused: true,
      keys: { active: 0, waiting: 1, retrying: 1, scheduled: 1, failed: 1 },
      oldestWaitingAgeMs: expect.any(Number),
    });
  });

  it('lists keys with state, attempts, next run and last error', async () => {
    expect(await json(['ls'])).toEqual([
      {
        key: 'vm:cli/broken',
        state: 'failed',
        attempts: 1,
        nextRunAt: null,
        lastError: 'terminal failure of vm:cli/broken',
      },
      {
        key: 'vm:cli/flaky',
        state: 'retrying',
        attempts: 1,
        nextRunAt: expect.any(Number),
        lastError: 'failure 1 of vm:cli/flaky',
      },
      {
        key: 'vm:cli/later',
        state: 'scheduled',
        attempts: 0,
        nextRunAt: expect.any(Number),
        lastError: null,
      },
      { key: 'vm:cli/waiting', state: 'waiting', attempts: 0, nextRunAt: null, lastError: null },
    ]);
    expect(await json(['ls', '--state', 'failed,retrying'])).toMatchObject([
      { key: 'vm:cli/broken' },
      { key: 'vm:cli/flaky' },
    ]);
    const table = (await vmop(['ls', '--state', 'retrying'])).split('\n');
    expect(table[0]).toMatch(/^KEY\s+STATE\s+ATTEMPTS\s+NEXT RUN\s+LAST ERROR$/);
    expect(table[1]).toMatch(
      /^vm:cli\/flaky\s+retrying\s+1\s+in (59m\d*s?|1h)\s+failure 1 of vm:cli\/flaky$/,
    );
  });

  it('shows one key with its failure and the events its jobs carried', async () => {
    expect(await json(['show', 'vm:cli/waiting'])).toMatchObject({
      state: 'waiting',
      recentJobs: [{ state: 'waiting', event: { event: 'SHUTDOWN', data: { guest: true } } }],
    });
    expect(await json(['show', 'vm:cli/broken'])).toMatchObject({
      state: 'failed',
      failure: { terminal: true, attempts: 1 },
      recentJobs: [{ state: 'failed', failedReason: 'terminal failure of vm:cli/broken' }],
    });
    expect(await vmop(['show', 'vm:cli/broken'])).toMatch(/failed\s+\S+ ago \(terminal\)/);
  });

  it('resumes and retries every failing key', async () => {
    await harness.setBehaviour('vm:cli/broken', {});
    await vmop(['resume']);
    expect(await json(['retry', '--failed'])).toEqual({ retried: ['vm:cli/broken', 'vm:cli/flaky'] });
    await harness.waitFor(
      'the retried keys to succeed',
      async () => (await harness.inspector.list()).length === 1,
    );
    expect(await json(['stats'])).toMatchObject({
      paused: false,
      keys: { active: 0, waiting: 0, retrying: 0, scheduled: 1, failed: 0 },
    });
  });

  it('says what is wrong without a reachable Redis instead of waiting for one', async () => {
    await expect(vmop(['stats'], { REDIS_URL: undefined })).rejects.toMatchObject({
      stderr: expect.stringContaining('set REDIS_URL or pass --redis <url>'),
    });
    await expect(vmop(['stats'], { REDIS_URL: 'redis://:secret@127.0.0.1:1' })).rejects.toMatchObject({
      stderr: expect.stringMatching(/^vmop queue: cannot reach Redis at 127\.0\.0\.1:1: .*ECONNREFUSED/),
    });
  });
});
