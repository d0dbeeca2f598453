// Disks attached to the running QEMU (config vm.hotplugDisks). Each is a claim that a helper pod
// exports over NBD with TLS-PSK (the VM's key); QEMU opens it as a block node and the guest gets a
// SCSI disk on the template's `hotplug-scsi` controller (no PCI slot per disk). What is attached
// is asked of QEMU each time, so a reconcile after any failure starts from the truth.
import { setTimeout as sleep } from 'node:timers/promises';
import { readPsk } from '../migration/channel.js';
import { addPskCredentials } from '../migration/qmp.js';
import { deviceAdd, deviceDel } from '../qmp/commands.js';
import type { HotplugDiskConfig } from '../../api/runner-config.js';
import type { HotplugDiskState } from '../../api/runner-snapshot.js';
import type { Logger } from '../../util/logger.js';
import type { QmpClient } from '../qmp/client.js';

/** The controller the templates provide for disks attached at runtime. */
export const HOTPLUG_CONTROLLER = 'hotplug-scsi';
const TLS_CREDS_ID = 'hotplug-tls';
const NODE_PREFIX = 'hotplug-';
const DEVICE_SUFFIX = '-device';
/** How long the guest may take to let a disk go (SCSI hot-unplug needs no guest cooperation). */
const DETACH_TIMEOUT_MS = 30_000;
/** A SCSI disk's serial has at most 36 characters. */
const MAX_SERIAL = 36;
const KEY_WAIT_MS = 10_000;
const REFUSED_WAIT_MS = 10_000;
const REFUSED_RETRY_MS = 100;
const KEY_POLL_MS = 100;
/** A failed attach is tried again (the key may not have reached the pod yet), ever less often. */
const RETRY_MS = { first: 2_000, max: 60_000 };

/** The block node of a disk attached at runtime. */
export const hotplugNode = (volume: string) => `${NODE_PREFIX}${volume}`;
const blockNode = hotplugNode;
const deviceId = (volume: string) => `${blockNode(volume)}${DEVICE_SUFFIX}`;
const endpointOf = (disk: HotplugDiskConfig) => `${disk.host}:${disk.port}/${disk.export}`;

/**
 * The key file, waiting a little for it: kubelet writes the key Secret's volume and the config's
 * in one pod sync, in no fixed order, so the config may name a disk a moment before the key is there.
 */
async function readPskOnceThere(file: string) {
  for (let waited = 0; ; waited += KEY_POLL_MS) {
    try {
      return await readPsk(file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || waited >= KEY_WAIT_MS) throw err;
      await sleep(KEY_POLL_MS);
    }
  }
}

export type ReportHotplugState = (volume: string, state: HotplugDiskState | undefined) => void;

export class HotplugController {
  /** The endpoint each attached disk was opened from (this QEMU's life only). */
  private readonly endpoints = new Map<string, string>();
  /** The volumes whose state the snapshot has. */
  private readonly reported = new Set<string>();
  private wanted: HotplugDiskConfig[] = [];
  private failed = false;
  private retryMs = RETRY_MS.first;
  private retryTimer?: NodeJS.Timeout;

  constructor(
    private readonly qmp: QmpClient,
    /** Where `keys.psk` is (the VM's key Secret, mounted). */
    private readonly keysDir: string,
    private readonly publish: ReportHotplugState,
    /** Runs a task after the runner's other QMP operations (a retry). */
    private readonly enqueue: (what: string, task: () => Promise<void>) => void,
    private readonly logger: Logger,
  ) {}

  /** Brings QEMU to `wanted`; what fails is tried again later, until `wanted` changes or it works. */
  async apply(wanted: HotplugDiskConfig[]): Promise<void> {
    const changed = JSON.stringify(wanted) !== JSON.stringify(this.wanted);
    if (!changed && !this.failed && wanted.length === 0) return;
    this.wanted = wanted;
    if (changed) this.retryMs = RETRY_MS.first;
    clearTimeout(this.retryTimer);
    this.failed = false;
    await this.reconcile(wanted);
    if (!this.failed) return;
    this.retryTimer = setTimeout(
      () => this.enqueue('attaching and detaching disks (again)', () => this.apply(this.wanted)),
      this.retryMs,
    );
    this.retryTimer.unref();
    this.retryMs = Math.min(this.retryMs * 2, RETRY_MS.max);
  }

  close(): void {
    clearTimeout(this.retryTimer);
  }

  private report(volume: string, state: HotplugDiskState | undefined): void {
    if (state) this.reported.add(volume);
    else if (!this.reported.delete(volume)) return;
    this.publish(volume, state);
  }

  /** Attaches what `wanted` has and QEMU lacks, detaches what QEMU has and `wanted` lacks. */
  private async reconcile(wanted: HotplugDiskConfig[]): Promise<void> {
    const { devices, nodes } = await this.attached();
    // A disk that failed to attach and is no longer wanted: nothing of it is left to tell.
    for (const volume of this.reported)
      if (!devices.has(volume) && !nodes.has(volume) && !wanted.some((disk) => disk.volume === volume))
        this.report(volume, undefined);
    const wantedByVolume = new Map(wanted.map((disk) => [disk.volume, disk]));
    for (const volume of new Set([...devices, ...nodes])) {
      const disk = wantedByVolume.get(volume);
      // A disk whose helper pod was made anew (another address) is opened from there again.
      if (disk && devices.has(volume) && this.endpoints.get(volume) === endpointOf(disk)) continue;
      if (disk && devices.has(volume) && !this.endpoints.has(volume)) {
        this.endpoints.set(volume, endpointOf(disk)); // attached before this controller: trusted
        continue;
      }
      await this.detach(volume, devices.has(volume));
      devices.delete(volume);
    }
    for (const disk of wanted) {
      if (devices.has(disk.volume)) {
        this.report(disk.volume, { state: 'attached' });
        continue;
      }
      await this.attach(disk);
    }
  }

  private async attached(): Promise<{ devices: Set<string>; nodes: Set<string> }> {
    const children = await this.qmp.execute<Array<{ name: string }>>('qom-list', {
      path: '/machine/peripheral',
    });
    const devices = new Set(
      children
        .map((child) => child.name)
        .filter((name) => name.startsWith(NODE_PREFIX) && name.endsWith(DEVICE_SUFFIX))
        .map((name) => name.slice(NODE_PREFIX.length, -DEVICE_SUFFIX.length)),
    );
    const named = await this.qmp.execute<Array<{ 'node-name': string }>>('query-named-block-nodes', {
      flat: true,
    });
    const nodes = new Set(
      named
        .map((node) => node['node-name'])
        .filter((name) => name.startsWith(NODE_PREFIX))
        .map((name) => name.slice(NODE_PREFIX.length)),
    );
    return { devices, nodes };
  }

  private async attach(disk: HotplugDiskConfig): Promise<void> {
    const { volume } = disk;
    this.report(volume, { state: 'attaching' });
    try {
      await this.ensureCredentials();
      await this.openExport(disk);
      try {
        await deviceAdd(this.qmp, 'scsi-hd', deviceId(volume), {
          bus: `${HOTPLUG_CONTROLLER}.0`,
          drive: blockNode(volume),
          serial: volume.slice(0, MAX_SERIAL),
        });
      } catch (err) {
        await this.qmp.execute('blockdev-del', { 'node-name': blockNode(volume) }).catch(() => undefined);
        throw err;
      }
      this.endpoints.set(volume, endpointOf(disk));
      this.logger.info({ volume, endpoint: endpointOf(disk) }, 'disk attached');
      this.report(volume, { state: 'attached' });
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      this.logger.warn({ volume, err: message }, 'attaching a disk failed');
      this.failed = true;
      this.report(volume, { state: 'failed', message: `attaching failed: ${message}` });
    }
  }

  /** The export as a block node; a refused connection (qemu-nbd still starting) is tried again soon. */
  private async openExport(disk: HotplugDiskConfig): Promise<void> {
    for (let waited = 0; ; waited += REFUSED_RETRY_MS) {
      try {
        await this.qmp.execute('blockdev-add', {
          driver: 'raw',
          'node-name': blockNode(disk.volume),
          file: {
            driver: 'nbd',
            server: { type: 'inet', host: disk.host, port: String(disk.port) },
            export: disk.export,
            'tls-creds': TLS_CREDS_ID,
          },
        });
        return;
      } catch (err) {
        if (!/Connection refused/i.test(String(err)) || waited >= REFUSED_WAIT_MS) throw err;
        await sleep(REFUSED_RETRY_MS);
      }
    }
  }

  private async detach(volume: string, hasDevice: boolean): Promise<void> {
    this.report(volume, { state: 'detaching' });
    try {
      if (hasDevice) {
        const deleted = this.qmp.waitForEvent('DEVICE_DELETED', {
          timeoutMs: DETACH_TIMEOUT_MS,
          match: (data: { device?: string }) => data.device === deviceId(volume),
        });
        deleted.catch(() => undefined);
        await deviceDel(this.qmp, deviceId(volume));
        await deleted;
      }
      await this.qmp.execute('blockdev-del', { 'node-name': blockNode(volume) });
      this.endpoints.delete(volume);
      this.logger.info({ volume }, 'disk detached');
      this.report(volume, undefined);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      this.logger.warn({ volume, err: message }, 'detaching a disk failed');
      this.failed = true;
      this.report(volume, { state: 'failed', message: `detaching failed: ${message}` });
    }
  }

  /**
   * The TLS-PSK client credentials, made once per QEMU from the key as it is now; their id. Also
   * what a snapshot's copy opens its exports with (snapshot-copy.ts).
   */
  async ensureCredentials(): Promise<string> {
    const objects = await this.qmp.execute<Array<{ name: string }>>('qom-list', { path: '/objects' });
    if (objects.some((object) => object.name === TLS_CREDS_ID)) return TLS_CREDS_ID;
    const { identity } = await readPskOnceThere(`${this.keysDir}/keys.psk`);
    await addPskCredentials(this.qmp, 'client', this.keysDir, identity, TLS_CREDS_ID);
    return TLS_CREDS_ID;
  }
}
