import type { Job } from 'bullmq';
import type { Logger } from '../util/logger.js';
import { backoffDelay, type Backoff } from './backoff.js';
import type { FollowUpPump } from './follow-up-pump.js';
import { HandlerResultSchema, type KeyHandler } from './handler.js';
import type { FailureRecord } from './key-state.js';
import { WorkKeySchema } from './keys.js';
import type { WorkerMetrics } from './metrics.js';
import type { KeyQueue } from './producer.js';
import { TerminalError } from './terminal-error.js';

/**
 * Runs the handler for one key's job and turns its outcome into queue state: success clears the
 * key's failures and schedules a requested requeue; a failure is recorded and, unless terminal,
 * retried after the key's backoff; an abort hands the key back for any replica to run at once.
 */
export class KeyRunner {
  /** Handlers running in this process, by job id. */
  readonly running = new Map<string, { key: string; startedAt: number }>();

  constructor(
    private readonly deps: {
      keys: KeyQueue;
      handler: KeyHandler;
      backoff: Backoff;
      pump: FollowUpPump;
      metrics?: WorkerMetrics;
      logger: Logger;
    },
  ) {}

  async run(job: Job, signal: AbortSignal): Promise<void> {
    const { keys, handler, metrics, logger } = this.deps;
    const key = WorkKeySchema.parse(job.name);
    const startedAt = Date.now();
    metrics?.enqueueToStart.observe(Math.max(0, startedAt - job.timestamp) / 1000);
    const prior = await keys.state.beginRun(key);
    const attempt = (prior?.attempts ?? 0) + 1;
    this.running.set(job.id!, { key, startedAt });
    try {
      const result = HandlerResultSchema.parse(await handler(key, { attempt, signal }));
      if (prior) {
        await keys.state.clearFailure(key);
        await this.removeFailedJob(prior.jobId);
      }
      if (result?.requeueAfter !== undefined)
        await this.requestFollowUp(key, Date.now() + result.requeueAfter);
      this.observe('success', startedAt);
    } catch (err) {
      if (signal.aborted) {
        // Interrupted (lock lost or shutdown), not failed: any replica may run the key again at once.
        await keys.state.requestFollowUp(key, Date.now());
        this.observe('aborted', startedAt);
        logger.info({ key, reason: signal.reason }, 'handler aborted; key queued again');
        return;
      }
      const terminal = err instanceof TerminalError;
      const retryAt = terminal ? undefined : Date.now() + backoffDelay(attempt, this.deps.backoff);
      await this.recordFailure(key, prior, { error: messageOf(err), terminal, jobId: job.id }, retryAt);
      if (retryAt !== undefined) {
        this.deps.pump.wake(retryAt);
        metrics?.retries.inc();
      }
      this.observe(terminal ? 'terminal' : 'error', startedAt);
      logger.warn({ key, attempt, terminal, retryAt, err }, 'handler failed');
      throw err;
    } finally {
      this.running.delete(job.id!);
    }
  }

  /** Records a failure (replacing the key's previous failed job), with a retry time unless terminal. */
  async recordFailure(
    key: string,
    prior: FailureRecord | undefined,
    failure: Pick<FailureRecord, 'error' | 'terminal' | 'jobId'>,
    retryAt?: number,
  ): Promise<void> {
    const record = { ...failure, attempts: (prior?.attempts ?? 0) + 1, failedAt: Date.now() };
    await this.deps.keys.state.recordFailure(key, record, retryAt);
    await this.removeFailedJob(prior?.jobId);
  }

  /** Seconds the oldest running handler has been running (0 when idle). */
  longestRunningSeconds(): number {
    let oldest = Infinity;
    for (const { startedAt } of this.running.values()) oldest = Math.min(oldest, startedAt);
    return oldest === Infinity ? 0 : (Date.now() - oldest) / 1000;
  }

  private async requestFollowUp(key: string, dueAt: number): Promise<void> {
    await this.deps.keys.state.requestFollowUp(key, dueAt);
    this.deps.pump.wake(dueAt);
  }

  private async removeFailedJob(jobId: string | undefined): Promise<void> {
    if (!jobId) return;
    await this.deps.keys.queue
      .remove(jobId)
      .catch((err: unknown) => this.deps.logger.warn({ err, jobId }, 'could not remove old failed job'));
  }

  private observe(outcome: string, startedAt: number): void {
    this.deps.metrics?.handlerDuration.observe({ outcome }, (Date.now() - startedAt) / 1000);
  }
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
