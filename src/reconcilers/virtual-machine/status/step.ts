// The VM's status, folded from everything observed and decided so far (derive.ts derives it), with
// its pool assignment (pools/assignment.ts). Written once per reconcile, guarded by the VM's
// resourceVersion: a replica that worked from an older VM is refused and reconciles again.
// Before a runner pod is made the status must name it, and every step of a migration is written
// first: two replicas never make two pods or two targets, or switch twice.
import type { KubernetesObject } from '@kubernetes/client-node';
import { isDeepStrictEqual } from 'node:util';
import type { VirtualMachineStatus } from '../../../api/virtual-machine.js';
import { isConflict } from '../../../kube/clients.js';
import { statusPatch, mergePatch } from '../../../kube/merge-patch.js';
import { trimForCache } from '../../../kube/object-cache.js';
import { consoleInUse, heldAssignment, withAssignment } from '../../../pools/assignment.js';
import type { ObjectEvent } from '../../events.js';
import { attachmentEvents } from '../disks/attachments.js';
import { vmApiRef } from '../naming.js';
import { policyStop } from '../lifecycle/run-policy.js';
import { runnerContainer } from '../runner-pod/facts.js';
import { currentSnapshot, deriveStatus, transitionEvents, type ObservedState } from './derive.js';
import { STATUS_CONFLICT, type Step, type StepResult } from '../pipeline.js';
import type { VmState } from '../vm-state.js';

/** The facts the status is folded from. */
function statusFacts(state: VmState): ObservedState {
  const { seen, plan, pod } = state;
  return {
    pod,
    snapshot: plan.podSnapshot,
    specErrors: state.specErrors,
    rejected: state.rejected,
    loadBalancer: state.loadBalancer,
    configDigest: plan.runnerConfig.digest,
    creatingPod: state.podPlan.create,
    node: pod?.spec?.nodeName ? seen.node(pod.spec.nodeName) : undefined,
    migration: {
      state: plan.migration.plan.state ?? seen.vm.status?.migrationState,
      migrating: plan.migration.plan.migrating,
      migratable: plan.migration.migratable,
    },
    disks: plan.diskSizes,
    waiting: plan.waiting,
    outdatedRunner: plan.outdatedRunner,
    runnerVm: plan.vm,
    ipAddress: plan.ipAddress,
    now: seen.now,
  };
}

/**
 * Writes `next` unless unchanged (or `force`); ends the reconcile when the VM changed meanwhile.
 * The Events of what changed go with it.
 */
export async function writeStatus(
  state: VmState,
  next: VirtualMachineStatus,
  force = false,
): Promise<StepResult> {
  const { seen, io } = state;
  if (!force && isDeepStrictEqual(JSON.parse(JSON.stringify(next)), state.statusBefore ?? {})) return {};
  const body = {
    metadata: { resourceVersion: state.resourceVersion },
    status: statusPatch(state.statusBefore, next),
  };
  let written: KubernetesObject;
  try {
    written = (await io.clients.customObjects.patchNamespacedCustomObjectStatus(
      { ...vmApiRef(seen.namespace, seen.name), body },
      mergePatch,
    )) as KubernetesObject;
  } catch (err) {
    if (!isConflict(err)) throw err;
    io.logger.debug({ key: seen.key }, 'the VM changed meanwhile; reconciling again once the cache has it');
    await io.waitForNewerVm(seen.vm);
    return { end: STATUS_CONFLICT };
  }
  trimForCache(written);
  io.rememberOwnWrite(written);
  state.resourceVersion = written.metadata?.resourceVersion;
  const events: ObjectEvent[] = [
    ...transitionEvents(state.statusBefore, next, seen.vm.spec.vm.state),
    ...attachmentEvents(state.statusBefore?.disks, next.disks),
  ];
  state.statusBefore = next;
  return { writes: ['status'], events };
}

export const statusStep: Step<VmState> = {
  name: 'status',
  async run(state) {
    const { seen, plan, pod } = state;
    const { vm } = seen;
    state.observedForStatus = statusFacts(state);
    const derived = deriveStatus(vm, state.observedForStatus);
    state.held = heldAssignment(vm, seen.assignedPool, consoleInUse({ status: derived }), seen.now);
    state.status = withAssignment(derived, state.held.assignment);
    state.resourceVersion = vm.metadata.resourceVersion;
    state.statusBefore = vm.status;
    state.policyStop = policyStop(vm, {
      pod,
      snapshot: currentSnapshot(plan.podSnapshot, pod, vm.status),
      status: state.status,
    });
    state.creating =
      state.podPlan.create !== undefined &&
      !state.policyStop &&
      state.specErrors.length === 0 &&
      state.rejected === undefined;
    const migrationStep = plan.migration.plan.state !== undefined;
    const written = await writeStatus(state, state.status, state.creating || migrationStep);
    // A runner's changes come as events through Redis (queue/runner-events.ts); while its running
    // container has reported nothing, look again anyway: a lost event must not leave the VM Starting.
    const reporting = state.status.conditions?.find((c) => c.type === 'RunnerReporting')?.status;
    const waitingForRunner = runnerContainer(pod)?.state?.running !== undefined && reporting !== 'True';
    return written.end || !waitingForRunner ? written : { ...written, requeueAfterMs: UNREPORTED_RECHECK_MS };
  },
};

/** How often a VM whose running runner has not reported is looked at again. */
const UNREPORTED_RECHECK_MS = 5_000;
