/**
 * A worker replica for the queue tests, run as its own process: `startWorkers` with a handler that
 * records every start and end in a separate "ledger" Redis (so the record survives a restart of the
 * queue's Redis). Per-key behaviour comes from the ledger too, so tests steer runs while they happen.
 * Prints `ready` on stdout once its workers run; SIGTERM closes them gracefully.
 */
import { Redis } from 'ioredis';
import { openWorkQueue, startWorkers, TerminalError } from '../../../src/queue/index.js';
import { BehaviourSchema, WorkerConfigSchema, ledgerKeys, type LedgerEvent } from './ledger.js';

const config = WorkerConfigSchema.parse(JSON.parse(process.env.VMOP_TEST_WORKER ?? '{}'));
const ledger = new Redis(config.ledgerUrl);
const producer = openWorkQueue({ redisUrl: config.queueUrl, queueName: config.queueName });

async function record(event: Omit<LedgerEvent, 'pid' | 'seq' | 't'>): Promise<number> {
  const seq = await ledger.incr(ledgerKeys.seq);
  await ledger.rpush(ledgerKeys.events, JSON.stringify({ ...event, pid: process.pid, seq, t: Date.now() }));
  return seq;
}

async function behaviourOf(key: string) {
  const json = await ledger.hget(ledgerKeys.behaviour, key);
  return BehaviourSchema.parse(json ? JSON.parse(json) : {});
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(new Error('aborted'));
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => (clearTimeout(timer), reject(new Error('aborted'))), {
      once: true,
    });
  });
}

async function holdUntilReleased(key: string, signal: AbortSignal): Promise<void> {
  while (!(await ledger.exists(ledgerKeys.release(key)))) await sleep(20, signal);
}

const workers = await startWorkers({
  redisUrl: config.queueUrl,
  queueName: config.queueName,
  concurrency: config.concurrency,
  lockDurationMs: config.lockDurationMs,
  stalledIntervalMs: config.stalledIntervalMs,
  shutdownTimeoutMs: config.shutdownTimeoutMs,
  followUpPollMs: config.followUpPollMs,
  ...(config.longRunWarnMs ? { longRunWarnMs: config.longRunWarnMs } : {}),
  ...(config.backoff ? { backoff: config.backoff } : {}),
  ...(config.rateLimit ? { rateLimit: config.rateLimit } : {}),
  ...(config.resync
    ? {
        resync: {
          everyMs: config.resync.everyMs,
          onResync: async () => {
            await record({ type: 'resync' });
            await producer.addMany(config.resync!.keys);
          },
        },
      }
    : {}),
  handler: async (key, ctx) => {
    const { signal } = ctx;
    const [behaviour, attempt] = await Promise.all([behaviourOf(key), ctx.attempt()]);
    const startSeq = await record({ type: 'start', key, attempt });
    let outcome = 'success';
    try {
      if (behaviour.holdUntilReleased) await holdUntilReleased(key, signal);
      const sleepMs = behaviour.sleepMs + Math.random() * behaviour.jitterMs;
      if (sleepMs > 0) await sleep(sleepMs, signal);
      if (behaviour.terminal) throw new TerminalError(`terminal failure of ${key}`);
      if (attempt <= behaviour.failTimes) throw new Error(`failure ${attempt} of ${key}`);
      if (behaviour.requeueAfter !== undefined) {
        const requeues = await ledger.incr(ledgerKeys.requeues(key));
        if (requeues <= behaviour.requeueTimes) return { requeueAfter: behaviour.requeueAfter };
      }
      return undefined;
    } catch (err) {
      outcome = signal.aborted ? 'aborted' : err instanceof TerminalError ? 'terminal' : 'error';
      throw err;
    } finally {
      await record({ type: 'end', key, attempt, startSeq, outcome });
    }
  },
});

process.once('SIGTERM', () => {
  void (async () => {
    // Told only once closing began (BullMQ stops fetching at once): a key the test adds after
    // seeing it must not start here (recorded first, one slipped in once).
    const closed = workers.close();
    await record({ type: 'closing' });
    await closed;
    await producer.close();
    await record({ type: 'closed' });
    ledger.disconnect();
    process.exit(0);
  })();
});

console.log('ready');
