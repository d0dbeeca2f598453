// The runner pods the VM has (plan.ts decides): one it did not make is adopted, one on a
// node that is gone for sure is removed, and those of a VM to be stopped are deleted with the
// VM's powerdownTimeout as grace (as it is now: it may have changed since the pod was made).
import { deletePodByUid } from '../../../kube/clients.js';
import { OPERATION_ANNOTATION } from '../naming.js';
import { stopGraceSeconds } from './pod.js';
import { adoptRunnerPod, isOwnedBy } from './writes.js';
import type { Step } from '../pipeline.js';
import type { VmState } from '../vm-state.js';

export const runnerPodsStep: Step<VmState> = {
  name: 'runner pods',
  owned: true,
  async run({ seen, io, pod, podPlan }) {
    const { vm, namespace } = seen;
    const writes: string[] = [];
    if (pod && !pod.metadata?.deletionTimestamp && !isOwnedBy(pod, vm)) {
      await adoptRunnerPod(io.clients, pod, vm);
      writes.push(`Pod ${pod.metadata!.name} (adopted)`);
    }
    for (const lost of podPlan.forget ?? []) {
      // Its node is gone for sure (deleted, or down and out of service): nothing of it runs.
      const { name, uid } = lost.metadata!;
      if (
        await deletePodByUid(
          io.clients.core,
          { name: name!, namespace, uid: uid! },
          { gracePeriodSeconds: 0 },
        )
      )
        writes.push(`Pod ${name} removed (its node ${lost.spec?.nodeName} is gone)`);
    }
    const operation = seen.operation(vm.metadata.annotations?.[OPERATION_ANNOTATION]);
    for (const stale of podPlan.stop) {
      const { name, uid } = stale.metadata!;
      const options = { gracePeriodSeconds: stopGraceSeconds(vm, operation) };
      if (await deletePodByUid(io.clients.core, { name: name!, namespace, uid: uid! }, options))
        writes.push(`Pod ${name} deleted (stop)`);
    }
    return { writes };
  },
};
