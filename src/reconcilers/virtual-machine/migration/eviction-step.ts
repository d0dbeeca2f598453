// The VM's disruption budget, and its evacuation when its node is cordoned (migration/eviction.ts
// decides): a drain moves it live instead of evicting it.
import { isNotFound } from '../../../kube/clients.js';
import { canTakeVms } from '../node-facts.js';
import { disruptionBudget, evacuation, planEviction } from './eviction.js';
import type { Step, StepResult } from '../pipeline.js';
import type { VmState } from '../vm-state.js';

export const evictionStep: Step<VmState> = {
  name: 'eviction',
  owned: true,
  async run({ seen, plan, io, pod }) {
    const { vm } = seen;
    const here = pod?.spec?.nodeName;
    const eviction = planEviction({
      vm,
      pod,
      node: here ? seen.node(here) : undefined,
      migratable: plan.migration.migratable,
      defaultStrategy: io.options.evictionStrategy ?? 'LiveMigrateIfPossible',
      evacuation: seen.operation(pod?.metadata?.uid ? evacuation(vm, pod).metadata.name : undefined),
      migrating: plan.migration.plan.migrating,
      otherNodeReady: seen.nodes.some((other) => canTakeVms(other, here)),
    });
    const result: StepResult = { writes: [], events: [] };
    const budget = seen.owned.budget;
    const wanted = disruptionBudget(vm, plan.migration.plan.migrating);
    if (eviction.budget && budget?.spec?.minAvailable !== wanted.spec!.minAvailable) {
      await io.apply(wanted, undefined);
      result.writes!.push('PodDisruptionBudget');
    } else if (!eviction.budget && budget) {
      await io.clients.objects.delete(wanted).catch((err: unknown) => {
        if (!isNotFound(err)) throw err;
      });
      result.writes!.push('PodDisruptionBudget (deleted)');
    }
    if (eviction.evacuate && (await io.createOperation(eviction.evacuate))) {
      result.writes!.push(
        `VirtualMachineOperation ${eviction.evacuate.metadata.name} (its node is cordoned)`,
      );
      result.events!.push({
        type: 'Normal',
        reason: 'Evacuating',
        message: `node ${here} is cordoned: moving the VM live to another node`,
      });
    }
    return result;
  },
};
