// The target runner's part of a live migration: its QEMU (and swtpm), rendered from its own config
// and image, waits for the incoming state; it asks the source what changed since the source's
// start (CPUs plugged in, CD media, disks to copy), makes the same changes, checks that its QEMU
// matches the source's, exports the disks the source copies (NBD over TLS), takes the state and
// lets the guest run. It never boots the guest itself: a target that fails just ends.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../../util/logger.js';
import { resolveCdImage } from '../drives.js';
import { freePort } from '../../util/free-port.js';
import {
  blockdevChangeMedium,
  blockdevOpenTray,
  blockdevRemoveMedium,
  deviceAdd,
  queryBlock,
} from '../qmp/commands.js';
import type { QmpClient, QmpEvent } from '../qmp/client.js';
import { connectToSource, readPsk, type Channel, type ChannelMessage, type Psk } from './channel.js';
import {
  TLS_CREDS_ID,
  addPskCredentials,
  formatNodes,
  exportForMirror,
  migrateIncoming,
  setCapabilities,
  setParameters,
  stopNbdServer,
} from './qmp.js';
import { arrivedMarker, setMarker, type MigrationRequest } from './request.js';
import { incomingTpmStateDir, withTpmStateDir } from './tpm-state.js';
import { waitForFile } from './wait.js';
import { fingerprintMismatch, machineFingerprint } from './fingerprint.js';
import type { ProcessLaunch } from '../processes.js';
import path from 'node:path';

export type Bundle = Extract<ChannelMessage, { type: 'bundle' }>;

/** How long the target tries to reach the source (its side channel opens once it saw the key). */
const CONNECT_TIMEOUT_MS = 60_000;

export interface Incoming {
  request: MigrationRequest;
  channel: Channel;
  bundle: Bundle;
  psk: Psk;
}

/**
 * This runner's own processes as a migration's target: QEMU waits for the incoming state, swtpm
 * keeps its state in the migration's own directory (tpm-state.ts).
 */
export function incomingProcesses(
  processes: { qemu: ProcessLaunch; swtpm?: ProcessLaunch },
  request: MigrationRequest,
  dataDir: string,
) {
  const tpmStateDir = incomingTpmStateDir(dataDir, request.id);
  return {
    qemu: { ...processes.qemu, args: [...processes.qemu.args, '-incoming', 'defer'] },
    ...(processes.swtpm && {
      swtpm: { ...processes.swtpm, args: withTpmStateDir(processes.swtpm.args, tpmStateDir) },
      tpmStateDir,
    }),
  };
}

/** Connects to the source and fetches what its QEMU is and what changed there since its start. */
export async function contactSource(
  request: MigrationRequest,
  keysDir: string,
  logger: Logger,
): Promise<Incoming> {
  if (!request.source) throw new Error('the migration request names no source');
  const [host, port] = [
    request.source.slice(0, request.source.lastIndexOf(':')),
    Number(request.source.split(':').pop()),
  ];
  const keys = path.join(keysDir, 'keys.psk');
  await waitForFile(keys, CONNECT_TIMEOUT_MS, () => false);
  const psk = await readPsk(keys);
  const deadline = Date.now() + CONNECT_TIMEOUT_MS;
  let channel: Channel | undefined;
  for (;;) {
    try {
      channel = await connectToSource(host, port, psk);
      break;
    } catch (err) {
      if (Date.now() > deadline)
        throw new Error(`cannot reach the migration source at ${request.source}: ${(err as Error).message}`);
      await sleep(500);
    }
  }
  channel.send({ type: 'hello', id: request.id });
  const bundle = await channel.next();
  if (bundle.type !== 'bundle') throw new Error(`the source sent ${bundle.type}, not what its QEMU is`);
  logger.info(
    { migration: request.id, source: request.source, mirror: bundle.mirror },
    'the migration source answered',
  );
  return { request, channel, bundle, psk };
}

/**
 * With this runner's QEMU started with `-incoming defer`: takes the migration in; resolves once
 * the guest's state is here and the source confirmed it let go (the caller lets the guest run at
 * once, then calls the returned `tidy`), throws when the migration failed (the guest runs on at the
 * source).
 */
export async function receive(
  qmp: QmpClient,
  incoming: Incoming,
  context: {
    keysDir: string;
    /** Where CD media named by the source (as configured) are. */
    imageRepository: string;
    dataDir: string;
    qemuExited: Promise<unknown>;
    address?: string;
    logger: Logger;
  },
): Promise<{ tidy: () => Promise<void> }> {
  const { bundle, channel, request } = incoming;
  let onEvent: ((event: QmpEvent) => void) | undefined;
  // This QEMU's end of the migration: completed, or failed.
  const arrived = new Promise<void>((resolve, reject) => {
    onEvent = (event: QmpEvent) => {
      if (event.event !== 'MIGRATION') return;
      const status = (event.data as { status?: string })?.status;
      if (status === 'completed') resolve();
      if (status === 'failed' || status === 'cancelled')
        reject(new Error(`the incoming migration ${status}`));
    };
    qmp.on('event', onEvent);
  });
  arrived.catch(() => undefined);
  try {
    for (const cpu of bundle.cpus) await deviceAdd(qmp, cpu.driver, cpu.id, cpu.props);
    const inserted = new Map(
      (await queryBlock(qmp)).map((b) => [b.qdev ?? b.device, b.inserted?.file ?? null]),
    );
    for (const [drive, medium] of Object.entries(bundle.media)) {
      const [here, file] = [inserted.get(drive), medium && resolveCdImage(medium, context.imageRepository)];
      if (file && here !== file) await blockdevChangeMedium(qmp, drive, file);
      // Ejected at the source (this QEMU started with the configured medium); the tray's own
      // position comes with the device's state.
      if (!file && here) {
        await blockdevOpenTray(qmp, drive);
        await blockdevRemoveMedium(qmp, drive);
      }
    }
    // The state fits only a QEMU like the source's: refused here, with what differs.
    const mismatch = fingerprintMismatch(bundle.fingerprint, await machineFingerprint(qmp));
    if (mismatch) throw new Error(mismatch);
    await setCapabilities(qmp, ['events', 'late-block-activate']);
    await addPskCredentials(qmp, 'server', context.keysDir, incoming.psk.identity);
    await setParameters(qmp, { 'tls-creds': TLS_CREDS_ID });
    const exports: Record<string, string> = {};
    let nbdPort: number | undefined;
    if (bundle.mirror.length > 0) {
      nbdPort = await freePort('0.0.0.0');
      const here = new Set(await formatNodes(qmp));
      for (const node of bundle.mirror) {
        if (!here.has(node)) throw new Error(`no disk ${node} here to take the copy`);
        exports[node] = node;
      }
      await exportForMirror(qmp, nbdPort, Object.values(exports));
    }
    const migrationPort = await freePort('0.0.0.0');
    await migrateIncoming(qmp, migrationPort);
    const { address } = context;
    channel.send({
      type: 'ready',
      migrationPort,
      ...(nbdPort && { nbdPort }),
      exports,
      ...(address && { address }),
    });
    context.logger.info(
      { migration: request.id, migrationPort, nbdPort },
      'ready for the incoming migration',
    );

    // The guest runs here only once the source, too, says it is done: until then it may still
    // resume the guest there (its QEMU does when the migration fails late).
    const sourceDone = channel.next().then((message) => {
      if (message.type !== 'ended') throw new Error(`the source sent ${message.type}, not how it ended`);
      if (message.result === 'failed')
        throw new Error(`the source gave up: ${message.message ?? 'no reason given'}`);
    });
    const qemuEnded = context.qemuExited.then(() => {
      throw new Error('QEMU ended while taking the migration in');
    });
    await Promise.race([Promise.all([arrived, sourceDone]), qemuEnded]);
    // The guest's state is here: from now on this pod runs it (a restarted runner boots it afresh).
    await setMarker(arrivedMarker(context.dataDir, request.id));
    return { tidy: async () => (nbdPort ? stopNbdServer(qmp) : undefined) };
  } finally {
    if (onEvent) qmp.off('event', onEvent);
    channel.close();
  }
}
