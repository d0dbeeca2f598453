// An upgrade's move of the VM onto the default runner image (update.ts decides).
import { runnerUpdate } from './update.js';
import type { Step } from '../pipeline.js';
import type { VmState } from '../vm-state.js';

export const runnerUpdateStep: Step<VmState> = {
  name: 'runner update',
  owned: true,
  async run({ seen, plan, io, pod }) {
    const operation = runnerUpdate({
      vm: seen.vm,
      pod,
      outdated: plan.outdatedRunner,
      migratable: plan.migration.migratable,
      method: io.options.runnerUpdate ?? 'LiveMigrate',
      migrating: plan.migration.plan.migrating,
    });
    if (!operation || !(await io.createOperation(operation))) return {};
    const how = operation.spec.type === 'Migrate' ? 'moving it live' : 'restarting it';
    return {
      writes: [`VirtualMachineOperation ${operation.metadata.name} (runner update)`],
      events: [
        {
          type: 'Normal',
          reason: 'RunnerUpdate',
          message: `it runs an older runner image than ${io.options.defaultRunnerImage.image}: ${how} onto it`,
        },
      ],
    };
  },
};
