import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../../util/logger.js';
import { blockNodeSize, blockResize, type QmpExecutor } from '../qmp/commands.js';

/** How long a grown volume may take to show its new size on this node (the device grows first). */
const GROW_ATTEMPTS = 30;
const GROW_INTERVAL_MS = 1_000;

/**
 * Gives the running guest a disk's new size once its volume grew (QEMU's block_resize; virtio-blk
 * tells the guest). A disk never shrinks here: a smaller size is ignored.
 */
export class DiskController {
  constructor(
    private readonly qmp: QmpExecutor,
    private readonly logger: Logger,
  ) {}

  async grow(id: string, bytes: number): Promise<void> {
    const before = await blockNodeSize(this.qmp, id);
    if (before === undefined) throw new Error(`no disk ${id}`);
    if (bytes <= before) return;
    for (let attempt = 1; ; attempt++) {
      try {
        await blockResize(this.qmp, id, bytes);
        this.logger.info({ disk: id, from: before, to: bytes }, 'disk grown');
        return;
      } catch (err) {
        // The claim says it holds more before the device here may (e.g. a node's expansion).
        if (attempt >= GROW_ATTEMPTS) throw err;
        this.logger.debug({ disk: id, err: String(err) }, 'the device has not grown yet; trying again');
        await sleep(GROW_INTERVAL_MS);
      }
    }
  }
}
