import type { Logger } from '../../util/logger.js';
import { resolveCdImage } from '../drives.js';
import {
  blockdevChangeMedium,
  blockdevOpenTray,
  blockdevRemoveMedium,
  queryBlock,
  type QmpExecutor,
} from '../qmp/commands.js';
import type { SnapshotStore } from '../snapshot/store.js';

const CHANGE_EVENT = { event: 'RUNNER_CD_MEDIUM' };
/** How often a change waiting for a locked tray tries to open it again. */
const REOPEN_EVERY_MS = 1_000;

/**
 * Changes CD media. The tray is opened first; when the guest has locked it (e.g. a mounted CD),
 * qemu asks the guest to eject and the change waits until the tray opens (DEVICE_TRAY_MOVED).
 * A guest without an eject daemon (udev) only unlocks it (umount): so the tray is tried again
 * every second until it opens. An empty image ejects (the medium is removed, the tray stays open).
 */
export class CdromController {
  private readonly pending = new Map<string, string>();
  private readonly reopening = new Map<string, NodeJS.Timeout>();

  constructor(
    private readonly qmp: QmpExecutor,
    private readonly store: SnapshotStore,
    private readonly imageRepository: string,
    private readonly logger: Logger,
    /** Runs a QMP task after the ones before it (the runner's queue). */
    private readonly enqueue: (what: string, task: () => Promise<void>) => void = (_what, task) =>
      void task(),
  ) {}

  close(): void {
    for (const timer of this.reopening.values()) clearInterval(timer);
    this.reopening.clear();
  }

  /** While a change waits for the locked tray: open it when the guest has let go of it. */
  private keepTrying(id: string): void {
    if (this.reopening.has(id)) return;
    const timer = setInterval(() => {
      if (!this.pending.has(id)) return this.stopTrying(id);
      this.enqueue('opening a locked CD tray', async () => {
        if (!this.pending.has(id)) return;
        await blockdevOpenTray(this.qmp, id);
        const info = (await queryBlock(this.qmp)).find((block) => block.qdev === id);
        if (info?.tray_open) await this.completeChange(id);
      });
    }, REOPEN_EVERY_MS);
    timer.unref();
    this.reopening.set(id, timer);
  }

  private stopTrying(id: string): void {
    clearInterval(this.reopening.get(id));
    this.reopening.delete(id);
  }

  async change(id: string, image: string): Promise<void> {
    const drive = this.store.snapshot.drives[id];
    if (!drive) return;
    this.pending.set(id, image);
    if (drive.tray === 'open') return this.completeChange(id);
    await blockdevOpenTray(this.qmp, id);
    const info = (await queryBlock(this.qmp)).find((block) => block.qdev === id);
    if (info?.tray_open) return this.completeChange(id);
    this.logger.info({ drive: id, image }, 'CD tray is locked by the guest; the change waits for it to open');
    this.keepTrying(id);
    this.store.update(
      (state) => ({
        ...state,
        drives: { ...state.drives, [id]: { ...drive, locked: info?.locked, pendingMedium: image } },
      }),
      CHANGE_EVENT,
    );
  }

  /** Called on DEVICE_TRAY_MOVED. */
  async trayMoved(id: string, open: boolean): Promise<void> {
    if (open && this.pending.has(id)) await this.completeChange(id);
  }

  private async completeChange(id: string): Promise<void> {
    const image = this.pending.get(id);
    if (image === undefined) return;
    this.pending.delete(id);
    this.stopTrying(id);
    const file = resolveCdImage(image, this.imageRepository);
    if (file) await blockdevChangeMedium(this.qmp, id, file);
    else await blockdevRemoveMedium(this.qmp, id);
    this.logger.info({ drive: id, image, file }, file ? 'CD medium changed' : 'CD ejected');
    this.store.update(
      (state) => ({
        ...state,
        drives: {
          ...state.drives,
          [id]: { tray: file ? 'closed' : 'open', ...(file ? { medium: image } : {}) },
        },
      }),
      CHANGE_EVENT,
    );
  }
}
