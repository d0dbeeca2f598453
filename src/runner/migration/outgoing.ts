// The runner's side of being a migration's source: it takes the requests the manager sends (its
// request stream, or its pod's annotation: start, or give up), runs one migration at a time after the QMP work queued before it,
// reports progress into the snapshot, and once the guest left, ends this QEMU.
import type { MigrationProgress } from '../../api/runner-snapshot.js';
import type { Logger } from '../../util/logger.js';
import type { QmpClient } from '../qmp/client.js';
import { quit } from '../qmp/commands.js';
import type { SnapshotStore } from '../snapshot/store.js';
import type { MigrationRequest } from './request.js';
import { migrateAway } from './source.js';

export interface OutgoingContext {
  logger: Logger;
  store: SnapshotStore;
  qmp(): QmpClient;
  keysDir: string;
  dataDir: string;
  /** Runs `task` after the QMP operations queued before it (CPU, RAM or CD changes wait for it). */
  enqueue(what: string, task: () => Promise<void>): void;
  /** The guest runs elsewhere now: this QEMU's end is no shutdown. */
  left(): void;
}

export class OutgoingMigrations {
  private current?: { id: string; abort: () => void };

  constructor(private readonly context: OutgoingContext) {}

  /**
   * A request came (it may repeat one already taken: both channels bring each): a migration to
   * start as its source, or to give up.
   */
  requestChanged(request: MigrationRequest | undefined): void {
    if (!request || request.role !== 'source') return;
    if (request.abort) {
      if (this.current?.id === request.id) this.current.abort();
      return;
    }
    if (this.current || this.context.store.snapshot.migration?.id === request.id) return; // under way, or done
    let abort: () => void = () => undefined;
    const aborted = new Promise<void>((resolve) => (abort = resolve));
    this.current = { id: request.id, abort };
    this.context.enqueue('the migration', async () => {
      try {
        await this.run(request, aborted);
      } finally {
        this.current = undefined;
      }
    });
  }

  private async run(request: MigrationRequest, aborted: Promise<void>): Promise<void> {
    const { store, logger } = this.context;
    const progress = (state: Omit<MigrationProgress, 'id' | 'role'>) =>
      store.update((current) => ({ ...current, migration: { id: request.id, role: 'source', ...state } }), {
        event: 'RUNNER_MIGRATION',
        data: { state: state.state },
      });
    const qmp = this.context.qmp();
    const result = await migrateAway(
      {
        qmp,
        logger,
        media: () =>
          Object.fromEntries(Object.entries(store.snapshot.drives).map(([id, d]) => [id, d.medium ?? null])),
        booted: store.snapshot.booted,
        keysDir: this.context.keysDir,
        dataDir: this.context.dataDir,
        progress,
        aborted,
      },
      request,
    );
    if (result !== 'completed') return;
    // The guest runs on the target now: this qemu (paused) goes, and the runner waits to be stopped.
    this.context.left();
    await quit(qmp).catch((err: unknown) => logger.warn({ err }, 'quit after the migration failed'));
  }
}
