// What the run policy does when qemu ended (run-policy.ts decided it in the status step): the VM
// is stopped for good; or, under restartApprovalMode Automatic, changes that wait for a restart
// get one.
import type { RunnerSnapshot } from '../../../api/runner-snapshot.js';
import type { VirtualMachine, VirtualMachineStatus } from '../../../api/virtual-machine.js';
import { mergePatch } from '../../../kube/merge-patch.js';
import { automaticRestart } from '../../virtual-machine-operation/operations.js';
import { OPERATION_ANNOTATION, vmApiRef } from '../naming.js';
import type { Step } from '../pipeline.js';
import type { VmState } from '../vm-state.js';

/**
 * restartApprovalMode Automatic: the VM runs, changes wait for a restart, its runner has the
 * current config (so the list is not stale, e.g. for an edit already reverted) and no operation
 * is in flight.
 */
function wantsAutomaticRestart(
  vm: VirtualMachine,
  status: VirtualMachineStatus | undefined,
  snapshot: RunnerSnapshot | undefined,
  desiredConfig: string,
): boolean {
  return (
    vm.spec.disruptions?.restartApprovalMode === 'Automatic' &&
    status?.phase === 'Running' &&
    (status.restartAwaitingChanges?.length ?? 0) > 0 &&
    snapshot?.config === desiredConfig &&
    !vm.metadata.annotations?.[OPERATION_ANNOTATION]
  );
}

export const runPolicyStep: Step<VmState> = {
  name: 'run policy',
  async run({ seen, plan, io, status, policyStop, resourceVersion }) {
    const { vm } = seen;
    if (policyStop) {
      await io.clients.customObjects.patchNamespacedCustomObject(
        // Guarded: an operation that claimed the VM since it was read (and so ended the pod) wins.
        {
          ...vmApiRef(seen.namespace, seen.name),
          body: { metadata: { resourceVersion }, spec: { vm: { state: 'Stopped' } } },
        },
        mergePatch,
      );
      const type = policyStop.reason === 'StoppedByGuest' ? 'Normal' : 'Warning';
      return {
        writes: [`spec.vm.state=Stopped (${policyStop.reason})`],
        events: [{ type, reason: policyStop.reason, message: policyStop.message }],
      };
    }
    if (!wantsAutomaticRestart(vm, status, plan.podSnapshot, plan.runnerConfig.digest)) return;
    const restart = automaticRestart(vm);
    if (!(await io.createOperation(restart))) return;
    const paths = status!.restartAwaitingChanges!.map((c) => c.path).join(', ');
    return {
      writes: [`VirtualMachineOperation ${restart.metadata.name} (restartApprovalMode Automatic)`],
      events: [
        {
          type: 'Normal',
          reason: 'RestartToApplyChanges',
          message: `restarting to apply ${paths} (restartApprovalMode Automatic)`,
        },
      ],
    };
  },
};
