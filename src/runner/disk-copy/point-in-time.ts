// Copies a running VM's disks as they all were at one instant (the cut), while the guest goes on:
// the building block of a VM snapshot on storage without CSI snapshots (issue 54). One QMP
// `transaction` starts a `blockdev-backup` (sync full) per disk, so every disk is cut at the same
// moment; QEMU then copies each block before the guest overwrites it (copy-before-write), so the
// guest waits for nothing once the jobs have started. With a guest agent that answers, its file
// systems are frozen around the cut (file-system consistent); without one the copy is what a
// power cut would leave (crash-consistent), and says so. qemu-guest-agent never thaws by itself,
// so the runner thaws right after the cut, and also when the cut takes longer than FREEZE_BOUND_MS.
import type { QmpClient } from '../qmp/client.js';
import type { Logger } from '../../util/logger.js';

/** The longest a guest stays frozen, whatever happens meanwhile (KubeVirt's auto-unfreeze is 5 min). */
export const FREEZE_BOUND_MS = 60_000;

export interface DiskCopy {
  /** The disk's format node in the running QEMU. */
  node: string;
  /** What to copy into: blockdev-add options of the target (an NBD export of the copy's volume). */
  target: Record<string, unknown>;
}

/** How a copy relates to the guest's state at the cut. */
export type Consistency = 'FileSystem' | 'Crash';

export interface CutCopies {
  consistency: Consistency;
  /** Why a copy is crash-consistent only (no agent, or the freeze failed). */
  reason?: string;
  cutAt: Date;
  /** How long the guest's file systems were frozen (0 when they were not). */
  frozenMs: number;
  /** Resolves when every copy is complete; rejects with the first job that failed. */
  done: Promise<void>;
}

/** The part of the guest agent client used here. */
export interface FreezingAgent {
  execute(command: string, options?: { timeoutMs?: number }): Promise<unknown>;
}

// By the disk's place in the copy, not its node's name: QEMU's node names have at most 31 characters.
const JOB_PREFIX = 'point-in-time-copy-';
const jobOf = (index: number) => `${JOB_PREFIX}${index}`;
const targetOf = (index: number) => `point-in-time-target-${index}`;

/**
 * Starts the copies of `disks` at one cut and returns once the cut is made (the guest thawed);
 * `done` tells when the copies are complete. The targets are removed again when the jobs end.
 */
export async function copyAtOneInstant(
  deps: {
    qmp: QmpClient;
    agent?: FreezingAgent;
    logger: Logger;
    freezeBoundMs?: number;
    /** Refuse a crash-consistent copy: no cut is made when the guest cannot be frozen. */
    requireFreeze?: boolean;
  },
  disks: DiskCopy[],
  /** A bound on each copy's rate, so that it leaves the VM's storage room (no bound when absent). */
  bytesPerSecond?: number,
): Promise<CutCopies> {
  const { qmp, logger } = deps;
  try {
    for (const [index, disk] of disks.entries())
      await qmp.execute('blockdev-add', { ...disk.target, 'node-name': targetOf(index) });
  } catch (err) {
    await removeTargets(qmp, disks); // those added before the one that failed
    throw err;
  }
  // Waited for before the transaction: a small disk's job may end in the reply's data chunk.
  const noJobs = new AbortController();
  // A job ends completed (with an error when it failed) or cancelled (cancelCopies).
  const ended = disks.map((_disk, index) => {
    const options = {
      match: (data: { device?: string }) => data.device === jobOf(index),
      timeoutMs: 24 * 3600_000,
      signal: noJobs.signal,
    };
    return Promise.race([
      qmp.waitForEvent('BLOCK_JOB_COMPLETED', options),
      qmp.waitForEvent('BLOCK_JOB_CANCELLED', options).then((event) => ({
        ...event,
        data: { ...event.data, error: 'the copy was cancelled' },
      })),
    ]);
  });
  ended.forEach((end) => end.catch(() => undefined)); // awaited below; not unhandled meanwhile
  // Never throws: a freeze that fails makes the copy crash-consistent.
  const frozen = await freeze(deps.agent, deps.freezeBoundMs ?? FREEZE_BOUND_MS, logger);
  if (deps.requireFreeze && frozen.consistency === 'Crash') {
    noJobs.abort();
    await removeTargets(qmp, disks);
    throw new CrashConsistentRefused(frozen.reason);
  }
  const frozenAt = Date.now();
  let cutAt: Date;
  try {
    await qmp.execute('transaction', {
      actions: disks.map((disk, index) => ({
        type: 'blockdev-backup',
        data: {
          'job-id': jobOf(index),
          device: disk.node,
          target: targetOf(index),
          sync: 'full',
          ...(bytesPerSecond !== undefined && { speed: bytesPerSecond }),
        },
      })),
    });
    cutAt = new Date();
  } catch (err) {
    noJobs.abort();
    await frozen.thaw();
    await removeTargets(qmp, disks);
    throw err;
  }
  // Thawed by the bound before the cut: the copy is not what a frozen guest had written.
  const consistency = frozen.thawedEarly() ? 'Crash' : frozen.consistency;
  const reason = frozen.thawedEarly() ? 'the cut took longer than the freeze may last' : frozen.reason;
  await frozen.thaw();
  const frozenMs = frozen.consistency === 'FileSystem' ? Date.now() - frozenAt : 0;
  const done = (async () => {
    try {
      const events = await Promise.all(ended);
      noJobs.abort(); // the other event of each job will not come
      const failed = events.findIndex((event) => (event.data as { error?: string }).error !== undefined);
      if (failed >= 0)
        throw new Error(
          `copying ${disks[failed]!.node} failed: ${String((events[failed]!.data as { error?: string }).error)}`,
        );
    } finally {
      await removeTargets(qmp, disks);
    }
  })();
  return { consistency, ...(reason && { reason }), cutAt, frozenMs, done };
}

/** No cut was made: the guest could not be frozen and a crash-consistent copy was refused. */
export class CrashConsistentRefused extends Error {
  constructor(reason: string) {
    super(`${reason}: a copy that is only crash-consistent was refused (requiredConsistency)`);
  }
}

/** Freezes the guest's file systems through its agent, if one answers; thaw() is safe to call twice. */
async function freeze(agent: FreezingAgent | undefined, boundMs: number, logger: Logger) {
  const crash = (reason: string) => ({
    consistency: 'Crash' as const,
    reason,
    thaw: async () => undefined,
    thawedEarly: () => false,
  });
  if (!agent) return crash('no guest agent answers');
  try {
    await agent.execute('guest-fsfreeze-freeze', { timeoutMs: boundMs / 2 });
  } catch (err) {
    // A freeze that failed half-way may have frozen some file systems.
    await agent.execute('guest-fsfreeze-thaw', { timeoutMs: 10_000 }).catch(() => undefined);
    return crash(`the guest agent could not freeze: ${(err as Error).message}`);
  }
  let thawed: Promise<void> | undefined;
  let early = false;
  const thaw = () =>
    (thawed ??= agent
      .execute('guest-fsfreeze-thaw', { timeoutMs: 10_000 })
      .then(() => clearTimeout(bound))
      .catch((err: unknown) => logger.warn({ err }, 'the guest agent could not thaw the guest')));
  const bound = setTimeout(() => {
    logger.warn({ boundMs }, 'the cut took too long: thawing the guest');
    early = true;
    void thaw();
  }, boundMs);
  return { consistency: 'FileSystem' as const, reason: undefined, thaw, thawedEarly: () => early };
}

/** Cancels the copies under way (a snapshot that no longer asks for them); their targets go as they end. */
export async function cancelCopies(qmp: QmpClient): Promise<void> {
  const jobs = await qmp.execute<Array<{ device: string }>>('query-block-jobs');
  for (const job of jobs.filter((each) => each.device.startsWith(JOB_PREFIX)))
    await qmp.execute('block-job-cancel', { device: job.device, force: true }).catch(() => undefined);
}

async function removeTargets(qmp: QmpClient, disks: DiskCopy[]) {
  for (const index of disks.keys())
    await qmp.execute('blockdev-del', { 'node-name': targetOf(index) }).catch(() => undefined);
}
