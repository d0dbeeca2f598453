import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterEach } from 'vitest';
import { startProcessGroup, type ProcessGroup } from '../../../src/devenv/process-group.js';
import { startRedis, type RedisServer } from '../../../src/devenv/redis.js';
import { openWorkQueue, type WorkQueue } from '../../../src/queue/index.js';
import { QueueInspector } from '../../../src/queue/inspect/inspector.js';
import { createLogger } from '../../../src/util/logger.js';
import {
  LedgerEventSchema,
  ledgerKeys,
  type Behaviour,
  type LedgerEvent,
  type WorkerConfig,
} from './ledger.js';

const REPO = fileURLToPath(new URL('../../../', import.meta.url));
const WORKER_SCRIPT = fileURLToPath(new URL('./worker-process.ts', import.meta.url));

export interface WorkerProcess {
  pid: number;
  child: ChildProcess;
  /** Everything the process wrote to stderr (its logs), for failure messages. */
  logs(): string;
  /** SIGTERM, then wait for the exit code. */
  terminate(): Promise<number | null>;
  /** SIGKILL, then wait for it to be gone. */
  kill(): Promise<void>;
  alive(): boolean;
}

/**
 * Two private Redis servers (queue + ledger), worker processes, and clean-up of all of them, even
 * if the test process dies (they are one process group, killed with it).
 */
export class QueueHarness {
  readonly producer: WorkQueue;
  readonly inspector: QueueInspector;
  readonly ledger: Redis;
  private readonly workers: WorkerProcess[] = [];
  private queueServer: RedisServer;

  private constructor(
    queueRedis: RedisServer,
    readonly ledgerRedis: RedisServer,
    private readonly group: ProcessGroup,
  ) {
    this.queueServer = queueRedis;
    this.producer = openWorkQueue({ redisUrl: queueRedis.url });
    this.inspector = new QueueInspector({ redisUrl: queueRedis.url });
    this.ledger = new Redis(ledgerRedis.url);
  }

  static async start(): Promise<QueueHarness> {
    const group = await startProcessGroup({ name: 'queue-test', logger: createLogger('queue-test') });
    const [queueRedis, ledgerRedis] = await Promise.all([startRedis({ group }), startRedis({ group })]);
    return new QueueHarness(queueRedis, ledgerRedis, group);
  }

  get queueRedis(): RedisServer {
    return this.queueServer;
  }

  /** Stops the queue's Redis and starts an empty one on the same port (no persistence: all is lost). */
  async restartQueueRedis(): Promise<void> {
    const port = this.queueServer.port;
    await this.queueServer.stop();
    this.queueServer = await startRedis({ port, group: this.group });
  }

  /** Starts a process in the harness's group: it dies with the harness, or should the test process die. */
  spawn(binary: string, args: string[], options: SpawnOptions): ChildProcess {
    const command = this.group.command(binary, args);
    return spawn(command.binary, command.args, options);
  }

  async spawnWorker(config: Partial<WorkerConfig> = {}): Promise<WorkerProcess> {
    const env = {
      ...process.env,
      VMOP_LOG_LEVEL: 'warn',
      VMOP_TEST_WORKER: JSON.stringify({
        queueUrl: this.queueRedis.url,
        ledgerUrl: this.ledgerRedis.url,
        ...config,
      }),
    };
    const child = this.spawn(process.execPath, ['--import', 'tsx', WORKER_SCRIPT], { cwd: REPO, env });
    let logs = '';
    child.stderr!.on('data', (chunk: Buffer) => (logs += chunk.toString()));
    const exited = once(child, 'exit');
    const worker: WorkerProcess = {
      pid: child.pid!,
      child,
      logs: () => logs,
      alive: () => child.exitCode === null && child.signalCode === null,
      async terminate() {
        if (worker.alive()) child.kill('SIGTERM');
        const [code] = await exited;
        return code as number | null;
      },
      async kill() {
        if (worker.alive()) child.kill('SIGKILL');
        await exited;
      },
    };
    this.workers.push(worker);
    let stdout = '';
    await new Promise<void>((resolve, reject) => {
      child.stdout!.on('data', (chunk: Buffer) => {
        stdout += chunk.toString();
        if (stdout.includes('ready')) resolve();
      });
      void exited.then(() => reject(new Error(`worker process exited before it was ready:\n${logs}`)));
    });
    return worker;
  }

  async setBehaviour(key: string, behaviour: Behaviour): Promise<void> {
    await this.ledger.hset(ledgerKeys.behaviour, key, JSON.stringify(behaviour));
  }

  async release(key: string): Promise<void> {
    await this.ledger.set(ledgerKeys.release(key), '1');
  }

  /** A position in the ledger's total order, e.g. taken just before an add. */
  async mark(): Promise<number> {
    return this.ledger.incr(ledgerKeys.seq);
  }

  async events(): Promise<LedgerEvent[]> {
    const lines = await this.ledger.lrange(ledgerKeys.events, 0, -1);
    return lines.map((line) => LedgerEventSchema.parse(JSON.parse(line)));
  }

  /** Finished runs of `key` (or of all keys), in start order. */
  async runs(key?: string): Promise<LedgerEvent[]> {
    return (await this.events())
      .filter((e) => e.type === 'end' && (key === undefined || e.key === key))
      .sort((a, b) => a.startSeq! - b.startSeq!);
  }

  async starts(key: string): Promise<LedgerEvent[]> {
    return (await this.events()).filter((e) => e.type === 'start' && e.key === key);
  }

  /** The first start of `key`, once there is one. */
  async firstStart(key: string): Promise<LedgerEvent> {
    const [first] = await this.waitFor(`${key} to start`, async () => {
      const starts = await this.starts(key);
      return starts.length > 0 ? starts : undefined;
    });
    return first!;
  }

  /** Polls until `check` passes; a deadline only so that a broken queue fails instead of hanging. */
  async waitFor<T>(
    what: string,
    check: () => Promise<T | undefined | false>,
    timeoutMs = 60_000,
  ): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const result = await check();
      if (result !== undefined && result !== false) return result;
      if (Date.now() > deadline) {
        const logs = this.workers.map((w) => `--- worker ${w.pid}:\n${w.logs().slice(-3000)}`).join('\n');
        throw new Error(`gave up waiting for ${what}\n${logs}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** Until nothing is queued, running or due again (failed keys may remain). */
  async waitForIdle(timeoutMs?: number): Promise<void> {
    await this.waitFor(
      'the queue to become idle',
      async () => (await this.inspector.list()).every((row) => row.state === 'failed'),
      timeoutMs,
    );
  }

  async stop(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.kill()));
    await Promise.allSettled([this.producer.close(), this.inspector.close()]);
    this.ledger.disconnect();
    await Promise.all([this.queueServer.stop(), this.ledgerRedis.stop()]);
    await this.group.release();
  }
}

/** For files whose tests each need a fresh harness: returns a starter, and stops what it started after each test. */
export function harnessPerTest(): () => Promise<QueueHarness> {
  const started: QueueHarness[] = [];
  afterEach(async () => {
    await Promise.all(started.splice(0).map((harness) => harness.stop()));
  });
  return async () => {
    const harness = await QueueHarness.start();
    started.push(harness);
    return harness;
  };
}
