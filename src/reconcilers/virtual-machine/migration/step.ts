// A live migration's writes (migration/plan.ts decided them, and the status step wrote its state
// first): the key Secret, the target pod and its claims, the runners' requests, the clean-up.
import { carryOutMigration } from './writes.js';
import type { Step } from '../pipeline.js';
import type { VmState } from '../vm-state.js';

export const migrationStep: Step<VmState> = {
  name: 'migration',
  async run(state) {
    const { seen, plan, io } = state;
    const migration = plan.migration.plan;
    const valid = state.specErrors.length === 0 && state.rejected === undefined;
    const writes = valid
      ? await carryOutMigration(io.clients, io.cache, seen.vm, migration, io.options.sendRunnerRequest)
      : [];
    // Ended (or refused): its slot is the next one's (the status says so already).
    if (migration.state?.result) await io.options.migrationSlots?.release(seen.key, migration.state.id);
    return { writes, requeueAfterMs: migration.requeueAfterMs };
  },
};
