import type { Job } from 'bullmq';
import type { Logger } from '../util/logger.js';
import { backoffDelay, type Backoff } from './backoff.js';
import type { FollowUpPump } from './follow-up-pump.js';
import { HandlerResultSchema, type HandlerResult, type KeyHandler } from './handler.js';
import type { FailureRecord } from './key-state.js';
import { WorkKeySchema } from './keys.js';
import type { WorkerMetrics } from './metrics.js';
import type { KeyQueue } from './producer.js';
import { TerminalError } from './terminal-error.js';

/** A handler running in this process. */
interface Run {
  key: string;
  startedAt: number;
  /** Set by cancel(); the run's signal reports it. */
  abortReason?: unknown;
  /** Made when the handler first reads its signal: most never do, and one per run costs. */
  controller?: AbortController;
  /** Logged as a long run already. */
  warned?: boolean;
}

/**
 * Runs the handler for one key's job and turns its outcome into queue state: success clears the
 * key's failures and schedules a requested requeue; a failure is recorded and, unless terminal,
 * retried after the key's backoff; an abort hands the key back for any replica to run at once.
 */
export class KeyRunner {
  /** Handlers running in this process, by job id. */
  readonly running = new Map<string, Run>();

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

  /** Aborts the signal of a running handler (its key's lock was lost, or the worker shuts down). */
  cancel(jobId: string, reason: string): void {
    const run = this.running.get(jobId);
    if (!run || run.abortReason !== undefined) return;
    run.abortReason = reason;
    run.controller?.abort(reason);
  }

  cancelAll(reason: string): void {
    for (const jobId of this.running.keys()) this.cancel(jobId, reason);
  }

  async run(job: Job): Promise<void> {
    const { keys, handler, metrics, logger } = this.deps;
    const key = WorkKeySchema.parse(job.name);
    const startedAt = Date.now();
    metrics?.enqueueToStart.observe(Math.max(0, startedAt - job.timestamp) / 1000);
    // The handler does not wait for this (a round trip per run); what needs earlier failures, or
    // requests a follow-up of this key, does.
    const begun = keys.state.beginRun(key);
    begun.catch(() => undefined); // awaited below; a failure counts then
    const run: Run = { key, startedAt };
    this.running.set(job.id!, run);
    const ctx = {
      attempt: async () => ((await begun)?.attempts ?? 0) + 1,
      get signal() {
        if (!run.controller) {
          run.controller = new AbortController();
          if (run.abortReason !== undefined) run.controller.abort(run.abortReason);
        }
        return run.controller.signal;
      },
    };
    try {
      // The job ends only after the handler has: a key is never handled twice at once.
      let result: HandlerResult;
      try {
        result = HandlerResultSchema.parse(await handler(key, ctx));
      } catch (err) {
        if (run.abortReason === undefined) return await this.failed(job, await begun, err, startedAt);
        // Interrupted (lock lost or shutdown), not failed: any replica may run the key again at once.
        await begun.catch(() => undefined);
        await keys.state.requestFollowUp(key, Date.now());
        this.observe('aborted', startedAt);
        logger.info({ key, reason: run.abortReason }, 'handler aborted; key queued again');
        return;
      }
      const prior = await begun;
      if (prior) {
        await keys.state.clearFailure(key);
        await this.removeFailedJob(prior.jobId);
      }
      if (result?.requeueAfter !== undefined)
        await this.requestFollowUp(key, Date.now() + result.requeueAfter);
      this.observe('success', startedAt);
    } finally {
      this.running.delete(job.id!);
    }
  }

  /** Records a failed run and, unless it is terminal, its retry after the key's backoff; rethrows. */
  private async failed(job: Job, prior: FailureRecord | undefined, err: unknown, startedAt: number) {
    const { metrics, logger } = this.deps;
    const key = job.name;
    const attempt = (prior?.attempts ?? 0) + 1;
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

  /** Logs, once each, the handlers that have run longer than `afterMs`. */
  warnLongRuns(afterMs: number, now = Date.now()): void {
    for (const run of this.running.values()) {
      if (run.warned || now - run.startedAt <= afterMs) continue;
      run.warned = true;
      this.deps.logger.warn(
        { key: run.key, runningSeconds: Math.round((now - run.startedAt) / 1000) },
        'a handler has run long: nothing else runs its key until it ends',
      );
    }
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
