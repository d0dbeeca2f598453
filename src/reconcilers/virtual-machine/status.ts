// Folds what the cluster shows about a VM into its status. Pure: the reconciler supplies the facts.
import type { V1Pod } from '@kubernetes/client-node';
import type { Condition, VirtualMachine, VirtualMachineStatus, VmPhase } from '../../api/virtual-machine.js';

export interface ObservedState {
  /** The runner pod `<vm>-0`, if it exists. */
  pod?: V1Pod;
  /** Problems with the spec that the CRD schema cannot catch; owned objects are left alone. */
  specErrors: string[];
  now: Date;
}

type ConditionFacts = Pick<Condition, 'type' | 'status' | 'reason' | 'message'>;

/** Keeps lastTransitionTime while a condition's status stays the same. */
function condition(
  previous: Condition[] | undefined,
  facts: ConditionFacts,
  generation: number,
  now: Date,
): Condition {
  const before = previous?.find((c) => c.type === facts.type);
  const lastTransitionTime =
    before && before.status === facts.status
      ? before.lastTransitionTime
      : now.toISOString().replace(/\.\d+Z$/, 'Z');
  return { ...facts, observedGeneration: generation, lastTransitionTime };
}

function podPhase(
  vm: VirtualMachine,
  pod: V1Pod | undefined,
): { phase: VmPhase; reason: string; message: string } {
  const wantRunning = vm.spec.vm.state === 'Running';
  if (!pod) {
    return wantRunning
      ? { phase: 'Pending', reason: 'PodNotCreated', message: 'waiting for the runner pod to be created' }
      : { phase: 'Stopped', reason: 'Stopped', message: 'the VM is stopped' };
  }
  if (pod.metadata?.deletionTimestamp || !wantRunning) {
    return { phase: 'Stopping', reason: 'PodTerminating', message: 'the runner pod is shutting down' };
  }
  switch (pod.status?.phase) {
    case 'Running':
      return { phase: 'Running', reason: 'PodRunning', message: `the runner runs on ${pod.spec?.nodeName}` };
    case 'Failed':
      return {
        phase: 'Failed',
        reason: 'PodFailed',
        message: pod.status?.message ?? 'the runner pod failed',
      };
    case 'Succeeded':
      return { phase: 'Stopped', reason: 'PodSucceeded', message: 'the runner exited after a shutdown' };
    default:
      return pod.spec?.nodeName
        ? {
            phase: 'Starting',
            reason: 'PodStarting',
            message: `the runner pod is starting on ${pod.spec.nodeName}`,
          }
        : { phase: 'Pending', reason: 'PodUnscheduled', message: 'the runner pod waits for a node' };
  }
}

export function deriveStatus(vm: VirtualMachine, observed: ObservedState): VirtualMachineStatus {
  const generation = vm.metadata.generation ?? 0;
  const previous = vm.status?.conditions;
  const { phase, reason, message } = podPhase(vm, observed.pod);
  const specValid: ConditionFacts =
    observed.specErrors.length === 0
      ? { type: 'SpecValid', status: 'True', reason: 'Valid', message: 'the spec can be run' }
      : {
          type: 'SpecValid',
          status: 'False',
          reason: 'InvalidSpec',
          message: observed.specErrors.join('; '),
        };
  const running: ConditionFacts = {
    type: 'Running',
    status: phase === 'Running' ? 'True' : 'False',
    reason,
    message,
  };
  const node = observed.pod?.spec?.nodeName;
  return {
    ...vm.status,
    phase,
    observedGeneration: generation,
    conditions: [specValid, running].map((facts) => condition(previous, facts, generation, observed.now)),
    ...(node ? { node } : { node: undefined }),
  };
}
