// The runner's side of being a migration's target, once its QEMU waits for the guest: takes the
// guest in (target.ts), lets it run the moment it arrived, and says in the snapshot how it runs.
import type { MigrationProgress } from '../../api/runner-snapshot.js';
import type { Logger } from '../../util/logger.js';
import type { QmpClient } from '../qmp/client.js';
import { cont, queryBalloon, queryBlock, queryCpuCount } from '../qmp/commands.js';
import type { SnapshotStore } from '../snapshot/store.js';
import { receive, type Incoming } from './target.js';

export interface ArrivalContext {
  qmp: QmpClient;
  store: SnapshotStore;
  logger: Logger;
  keysDir: string;
  imageRepository: string;
  dataDir: string;
  qemuExited: Promise<unknown>;
  /** This pod's address, where the source reaches this QEMU (the source may see another: NAT). */
  address?: string;
  /** Sets this QEMU's display password (it is not part of the migrated state). */
  setDisplayPassword(): Promise<void>;
  /** The guest runs in this QEMU now. */
  running(): void;
}

/** Takes the guest in and lets it run; throws when it did not come (it runs on at the source). */
export async function arriveIn(incoming: Incoming, context: ArrivalContext): Promise<void> {
  const { qmp, store, logger } = context;
  const id = incoming.request.id;
  const progress = (state: Omit<MigrationProgress, 'id' | 'role'>) =>
    store.update((current) => ({ ...current, migration: { id, role: 'target', ...state } }), {
      event: 'RUNNER_MIGRATION',
      data: { state: state.state },
    });
  progress({ state: 'preparing' });
  let arrived: Awaited<ReturnType<typeof receive>>;
  try {
    // Set before the guest arrives, so nothing stands between its arrival and its running on.
    await context.setDisplayPassword();
    arrived = await receive(qmp, incoming, context);
  } catch (err) {
    progress({ state: 'failed', message: (err as Error).message });
    throw err;
  }
  await cont(qmp);
  context.running();
  await arrived.tidy().catch((err: unknown) => logger.warn({ err }, 'tidying up after the arrival failed'));

  const [cpus, ram, blocks] = [await queryCpuCount(qmp), await queryBalloon(qmp), await queryBlock(qmp)];
  const trayOpen = new Map(blocks.map((block) => [block.qdev ?? block.device, block.tray_open === true]));
  const { booted, media } = incoming.bundle;
  store.update(
    (state) => ({
      ...state,
      phase: booted ? 'running' : 'booting',
      booted,
      cpus,
      ram,
      drives: Object.fromEntries(
        Object.entries(media).map(([drive, medium]) => [
          drive,
          {
            tray: trayOpen.get(drive) ? ('open' as const) : ('closed' as const),
            ...(medium ? { medium } : {}),
          },
        ]),
      ),
      migration: { id, role: 'target', state: 'completed' },
    }),
    { event: 'RUNNER_MIGRATED_IN' },
  );
  logger.info({ migration: id, cpus, ram }, 'the guest migrated in and runs');
}
