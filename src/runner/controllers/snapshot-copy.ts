// A VirtualMachineSnapshot's copy of the running VM's disks (config vm.snapshotCopy): each disk is
// opened as an NBD export of the snapshot's claim (TLS with the VM's key, as attached disks are),
// and copied as it was at one instant while the guest runs (disk-copy/point-in-time.ts). What it
// did is reported in the runner's snapshot, so the snapshot's status follows through the VM's.
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { DriveConfig } from '../../api/runner-config.js';
import type { SnapshotCopyConfig, SnapshotCopyState } from '../../api/snapshot-copy.js';
import type { Logger } from '../../util/logger.js';
import { copyAtOneInstant, cancelCopies, type FreezingAgent } from '../disk-copy/point-in-time.js';
import { diskId } from '../drives.js';
import { hotplugNode } from './hotplug.js';
import type { QmpClient } from '../qmp/client.js';

/** How long an export pod that runs may take to listen (qemu-nbd starts within moments). */
const LISTEN_WAIT_MS = 15_000;
const LISTEN_RETRY_MS = 200;

export interface SnapshotCopyDeps {
  qmp: QmpClient;
  /** The drives QEMU was started with: a disk's block node by its volume. */
  drives: DriveConfig[];
  /** The volumes of the disks attached at runtime now. */
  attached(): string[];
  /** The TLS-PSK client credentials' id, made once per QEMU. */
  credentials(): Promise<string>;
  /** The guest agent, while one answers. */
  agent(): FreezingAgent | undefined;
  publish(state: SnapshotCopyState | undefined): void;
  logger: Logger;
}

/** The block node of the disk whose device in the pod is /dev/<volume>, or of one attached at runtime. */
export function diskNodeOf(drives: DriveConfig[], attached: string[], volume: string): string | undefined {
  const index = drives
    .filter((drive) => drive.type === 'raw')
    .findIndex((drive) => drive.resource === `/dev/${volume}` || drive.device === `/dev/${volume}`);
  if (index >= 0) return diskId(index);
  return attached.includes(volume) ? hotplugNode(volume) : undefined;
}

/** Resolves once `host:port` takes a TCP connection, or throws after `LISTEN_WAIT_MS`. */
async function listening(host: string, port: number): Promise<void> {
  for (let waited = 0; ; waited += LISTEN_RETRY_MS) {
    const error = await new Promise<Error | undefined>((resolve) => {
      const socket = connect({ host, port }, () => {
        socket.destroy();
        resolve(undefined);
      });
      socket.once('error', resolve);
    });
    if (!error) return;
    if (waited >= LISTEN_WAIT_MS) throw new Error(`no export answers at ${host}:${port}: ${error.message}`);
    await sleep(LISTEN_RETRY_MS);
  }
}

export class SnapshotCopyController {
  /** The copy of this QEMU's life: its snapshot's uid and what became of it. */
  private current?: { id: string; state: SnapshotCopyState };

  constructor(private readonly deps: SnapshotCopyDeps) {}

  /** Starts the copy `wanted` asks for (once per snapshot), or ends one no longer asked for. */
  async apply(wanted: SnapshotCopyConfig | undefined): Promise<void> {
    if (wanted?.id === this.current?.id) return;
    const before = this.current;
    this.current = undefined;
    if (before?.state.state === 'copying') {
      this.deps.logger.info(
        { snapshot: before.id },
        'the snapshot no longer asks for its copy: cancelling it',
      );
      await cancelCopies(this.deps.qmp);
    }
    if (!wanted) {
      if (before) this.deps.publish(undefined);
      return;
    }
    await this.start(wanted);
  }

  private report(id: string, state: Omit<SnapshotCopyState, 'id'>): void {
    // A report of a copy no longer asked for says nothing.
    if (this.current && this.current.id !== id) return;
    this.current = { id, state: { id, ...state } };
    this.deps.publish(this.current.state);
  }

  private async start(wanted: SnapshotCopyConfig): Promise<void> {
    const { qmp, logger } = this.deps;
    const { id } = wanted;
    this.current = { id, state: { id, state: 'copying' } };
    const failed = (err: unknown) => {
      const message = err instanceof Error ? err.message : String(err);
      logger.warn({ snapshot: id, err: message }, 'the snapshot copy failed');
      this.report(id, { state: 'failed', message });
    };
    try {
      const credentials = await this.deps.credentials();
      const disks = await Promise.all(
        wanted.disks.map(async (disk) => {
          const node = diskNodeOf(this.deps.drives, this.deps.attached(), disk.volume);
          if (!node) throw new Error(`the VM has no disk of volume ${disk.volume}`);
          await listening(disk.host, disk.port);
          return {
            node,
            target: {
              driver: 'raw',
              // Runs of zeros go as NBD write-zeroes requests, not as data through TLS.
              'detect-zeroes': 'unmap',
              discard: 'unmap',
              file: {
                driver: 'nbd',
                server: { type: 'inet', host: disk.host, port: String(disk.port) },
                export: disk.export,
                'tls-creds': credentials,
              },
            },
          };
        }),
      );
      const agent = this.deps.agent();
      const cut = await copyAtOneInstant(
        { qmp, logger, requireFreeze: wanted.requireFreeze, ...(agent && { agent }) },
        disks,
      );
      const facts = {
        consistency: cut.consistency,
        ...(cut.reason && { reason: cut.reason }),
        cutAt: cut.cutAt.toISOString(),
        frozenMs: cut.frozenMs,
      };
      logger.info({ snapshot: id, ...facts }, 'disks cut for a snapshot; copying');
      this.report(id, { state: 'copying', ...facts });
      cut.done.then(
        () => {
          logger.info({ snapshot: id }, 'the snapshot copy is complete');
          this.report(id, { state: 'completed', ...facts });
        },
        (err: unknown) => failed(err),
      );
    } catch (err) {
      failed(err);
    }
  }
}
