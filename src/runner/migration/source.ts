// The source runner's part of a live migration: it opens the side channel, tells the target what
// its QEMU is and what changed since its start, copies the disks the target does not share (block mirrors into the target's NBD
// exports), sends the guest's memory and device state (QEMU over TLS), and only at the point of no
// return, paused before the switch-over, notes that the guest left. Until then any failure leaves
// the guest running here as it was.
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { MigrationProgress } from '../../api/runner-snapshot.js';
import type { Logger } from '../../util/logger.js';
import { cont, queryHotpluggableCpus } from '../qmp/commands.js';
import type { QmpClient, QmpEvent } from '../qmp/client.js';
import { machineFingerprint } from './fingerprint.js';
import { listenForTarget, readPsk, type Channel, type ChannelMessage } from './channel.js';
import {
  TLS_CREDS_ID,
  addPskCredentials,
  blockNodeOf,
  finishMirror,
  migrate,
  migrateCancel,
  migrateContinue,
  mirrorTo,
  queryMigrate,
  removeMirrorTarget,
  setCapabilities,
  setParameters,
} from './qmp.js';
import { clearMarker, leftMarker, setMarker, type MigrationRequest } from './request.js';
import { waitForFile } from './wait.js';

/** QEMU's default downtime limit; the guest pauses at most about this long at the switch-over. */
const DOWNTIME_LIMIT_MS = 300;
/** How long the source waits for its target to connect (the target pod is scheduled and starts). */
const TARGET_CONNECT_TIMEOUT_MS = 5 * 60_000;

export interface SourceContext {
  qmp: QmpClient;
  logger: Logger;
  /** CD drives' media now, by drive id. */
  media(): Record<string, string | null>;
  booted: boolean;
  /** Where the migration's key file (keys.psk) appears. */
  keysDir: string;
  dataDir: string;
  /** Reports progress (into the runner's snapshot). */
  progress(progress: Omit<MigrationProgress, 'id' | 'role'>): void;
  /** Resolves when the manager asks to give up. */
  aborted: Promise<void>;
}

/** Devices added with an id live under this QOM path (hot-plugged CPUs among them). */
const PERIPHERAL = '/machine/peripheral/';

class Aborted extends Error {
  constructor() {
    super('the migration was cancelled');
  }
}

type WaitFor = (match: (event: QmpEvent) => boolean) => Promise<QmpEvent>;

/** QMP events as they come, to wait for one (past or future); an abort rejects every wait. */
function qmpEvents(qmp: QmpClient, abortedSignal: Promise<void>) {
  const events: QmpEvent[] = [];
  const waiters = new Set<() => void>();
  const onEvent = (event: QmpEvent) => {
    events.push(event);
    for (const wake of waiters) wake();
  };
  qmp.on('event', onEvent);
  const state = { aborted: false };
  abortedSignal.then(
    () => {
      state.aborted = true;
      for (const wake of waiters) wake();
    },
    () => undefined,
  );
  /** Resolves with the first event (past or future) that matches. */
  const waitFor: WaitFor = (match) =>
    new Promise<QmpEvent>((resolve, reject) => {
      const check = () => {
        if (state.aborted) return done(() => reject(new Aborted()));
        const found = events.find(match);
        if (found) done(() => resolve(found));
      };
      const done = (settle: () => void) => {
        waiters.delete(check);
        settle();
      };
      waiters.add(check);
      check();
    });
  return { waitFor, isAborted: () => state.aborted, stop: () => qmp.off('event', onEvent) };
}

const migrationStatus = (status: string) => (e: QmpEvent) =>
  e.event === 'MIGRATION' && (e.data as { status?: string } | undefined)?.status === status;
const ended = (e: QmpEvent) =>
  e.event === 'MIGRATION' &&
  ['completed', 'failed', 'cancelled'].includes(String((e.data as { status?: string })?.status));

/** Opens the side channel once the key is there, and waits for this migration's target to connect. */
async function connectTarget(
  context: SourceContext,
  request: MigrationRequest,
  isAborted: () => boolean,
  opened: (listener: Awaited<ReturnType<typeof listenForTarget>>) => void,
) {
  const keys = path.join(context.keysDir, 'keys.psk');
  await waitForFile(keys, 60_000, isAborted);
  const psk = await readPsk(keys);
  const listener = await listenForTarget(psk);
  opened(listener);
  context.progress({ state: 'listening', port: listener.port });
  context.logger.info({ migration: request.id, port: listener.port }, 'waiting for the migration target');
  const channel = await Promise.race([
    listener.accepted,
    new Promise<never>((_, reject) =>
      setTimeout(
        () => reject(new Error('the target did not connect in time')),
        TARGET_CONNECT_TIMEOUT_MS,
      ).unref(),
    ),
    context.aborted.then(() => Promise.reject(new Aborted())),
  ]);
  return { channel, psk };
}

/** Tells the target what its QEMU must match and what changed here (CPUs, media, disks to copy); its answer. */
async function sendBundle(context: SourceContext, request: MigrationRequest, channel: Channel) {
  const hello = await channel.next();
  if (hello.type !== 'hello' || hello.id !== request.id)
    throw new Error('the target is of another migration');
  const cpus = (await queryHotpluggableCpus(context.qmp))
    .filter((slot) => slot['qom-path']?.startsWith(PERIPHERAL))
    .map((slot) => ({
      driver: slot.type,
      id: slot['qom-path']!.slice(PERIPHERAL.length),
      props: slot.props,
    }));
  // The disks to copy by their block node (the template names them from the config, so the
  // target's are named alike, whatever their host files are called there).
  const mirror: string[] = [];
  for (const file of request.mirror) {
    const node = await blockNodeOf(context.qmp, file);
    if (!node) throw new Error(`no disk of ${file} to copy`);
    mirror.push(node);
  }
  channel.send({
    type: 'bundle',
    fingerprint: await machineFingerprint(context.qmp),
    cpus,
    media: context.media(),
    mirror,
    booted: context.booted,
  });
  context.progress({ state: 'preparing' });
  const ready = (await channel.next()) as Extract<ChannelMessage, { type: 'ready' }>;
  if (ready.type !== 'ready') throw new Error(`the target sent ${ready.type}, not ready`);
  return { ready, mirror };
}

type Job = { node: string; job: string; bytes?: number };

/** Copies the disks the target does not share into its NBD exports; mirroring goes on after. */
async function mirrorDisks(
  context: SourceContext,
  request: MigrationRequest,
  target: { host: string; ready: Extract<ChannelMessage, { type: 'ready' }>; mirror: string[] },
  waitFor: WaitFor,
  jobs: Job[],
): Promise<void> {
  const { qmp } = context;
  context.progress({ state: 'mirroring' });
  for (const node of target.mirror) {
    const exported = target.ready.exports[node];
    if (!exported || !target.ready.nbdPort) throw new Error(`the target exports no disk for ${node}`);
    const job = await mirrorTo(qmp, node, {
      host: target.host,
      port: target.ready.nbdPort,
      export: exported,
    });
    jobs.push({ node, job });
  }
  for (const entry of jobs) {
    const readyEvent = await waitFor(
      (e) => e.event === 'BLOCK_JOB_READY' && (e.data as { device?: string })?.device === entry.job,
    );
    entry.bytes = (readyEvent.data as { len?: number }).len ?? 0;
  }
  context.logger.info({ migration: request.id, disks: jobs.length }, 'disks copied; mirroring on');
}

/**
 * The point of no return: the guest is paused here, its state about to go. A restarted runner
 * must not boot it again (the marker says it left), whatever happens next.
 */
async function switchOver(qmp: QmpClient, left: string, jobs: Job[], waitFor: WaitFor): Promise<void> {
  await setMarker(left);
  for (const { job } of jobs) {
    await finishMirror(qmp, job);
    await waitFor(
      (e) => e.event === 'BLOCK_JOB_COMPLETED' && (e.data as { device?: string })?.device === job,
    );
  }
  await migrateContinue(qmp);
  const end = await waitFor(ended);
  if (!migrationStatus('completed')(end)) {
    await clearMarker(left);
    throw new Error(await failureOf(qmp));
  }
}

/** Runs the source's part; resolves with how it ended (the guest runs here unless 'completed'). */
export async function migrateAway(
  context: SourceContext,
  request: MigrationRequest,
): Promise<'completed' | 'failed'> {
  const { qmp, logger } = context;
  const events = qmpEvents(qmp, context.aborted);
  let channel: Channel | undefined;
  let listener: Awaited<ReturnType<typeof listenForTarget>> | undefined;
  const jobs: Job[] = [];
  try {
    const connected = await connectTarget(context, request, events.isAborted, (l) => (listener = l));
    channel = connected.channel;
    const { ready, mirror } = await sendBundle(context, request, channel);
    const host = ready.address ?? channel.remoteAddress;
    await addPskCredentials(qmp, 'client', context.keysDir, connected.psk.identity);
    await setCapabilities(qmp, ['events', 'pause-before-switchover']);
    await setParameters(qmp, {
      'tls-creds': TLS_CREDS_ID,
      'tls-hostname': host,
      'downtime-limit': DOWNTIME_LIMIT_MS,
    });
    if (mirror.length > 0) await mirrorDisks(context, request, { host, ready, mirror }, events.waitFor, jobs);
    context.progress({ state: 'transferring' });
    await migrate(qmp, host, ready.migrationPort);
    const stage = await events.waitFor((e) => migrationStatus('pre-switchover')(e) || ended(e));
    if (!migrationStatus('pre-switchover')(stage)) throw new Error(await failureOf(qmp));
    await switchOver(qmp, leftMarker(context.dataDir, request.id), jobs, events.waitFor);
    // The guest is the target's now (it runs once it hears this): nothing here may resume it.
    channel.send({ type: 'ended', result: 'completed' });
    const info = await finalFigures(qmp).catch((err: unknown) => {
      logger.warn({ err: String(err) }, "QEMU's figures of the migration could not be read");
      return {} as Awaited<ReturnType<typeof finalFigures>>;
    });
    const mirrored = jobs.reduce((sum, entry) => sum + (entry.bytes ?? 0), 0);
    context.progress({
      state: 'completed',
      downtimeMs: info.downtime,
      totalMs: info['total-time'],
      bytes: (info.ram?.transferred ?? 0) + mirrored,
    });
    logger.info(
      { migration: request.id, downtime: info.downtime, total: info['total-time'] },
      'migrated away',
    );
    return 'completed';
  } catch (err) {
    const message = (err as Error).message;
    logger.warn({ migration: request.id, reason: message }, 'the migration failed; the guest stays here');
    channel?.send({ type: 'ended', result: 'failed', message });
    await giveUp(qmp, jobs, logger);
    context.progress({ state: 'failed', message });
    return 'failed';
  } finally {
    events.stop();
    listener?.close();
    channel?.close();
  }
}

/**
 * QEMU's figures of a completed migration: it sends the completed event before it computed them
 * (total-time and downtime read 0 for a moment), so ask until they are there.
 */
async function finalFigures(qmp: QmpClient) {
  for (let attempt = 0; ; attempt++) {
    const info = await queryMigrate(qmp);
    if ((info['total-time'] ?? 0) > 0 || attempt >= 50) return info;
    await sleep(20);
  }
}

/** Why a migration failed, in QEMU's words. */
async function failureOf(qmp: QmpClient): Promise<string> {
  const info = await queryMigrate(qmp).catch(() => undefined);
  return `QEMU's migration ${info?.status ?? 'failed'}${info?.['error-desc'] ? `: ${info['error-desc']}` : ''}`;
}

/** Undoes what the source did: the migration and mirrors cancelled, the guest running again. */
async function giveUp(
  qmp: QmpClient,
  jobs: Array<{ node: string; job: string }>,
  logger: Logger,
): Promise<void> {
  const quietly = (what: string, action: () => Promise<unknown>) =>
    action().catch((err: unknown) => logger.debug({ err: String(err) }, `${what} (while giving up)`));
  await quietly('migrate_cancel', () => migrateCancel(qmp));
  for (const { node, job } of jobs) {
    await quietly('block-job-cancel', () => qmp.execute('block-job-cancel', { device: job, force: true }));
    await quietly('blockdev-del', () => removeMirrorTarget(qmp, node));
  }
  // Paused for the switch-over when it failed: let the guest run on.
  const status = (await qmp.execute<{ status: string }>('query-status').catch(() => undefined))?.status;
  if (status && status !== 'running') await quietly('cont', () => cont(qmp));
}
