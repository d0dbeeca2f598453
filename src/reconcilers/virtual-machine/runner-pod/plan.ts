// Which runner pods a VM should have, from the ones it has (pure). vmop makes a VM's runner pod
// itself, so it must never make a second one while one may still run the VM: a pod is made only
// when none of the VM's pods exists, only after the status named it in a write the apiserver
// guards with the VM's resourceVersion (a replica working from an older VM is refused), and a pod
// the status names but the cache lacks is looked up before it counts as gone.
import type { V1Pod } from '@kubernetes/client-node';
import type { VirtualMachine } from '../../../api/virtual-machine.js';
import { isGoneForSure, type NodeFacts } from '../node-facts.js';
import { isMigrationTarget } from '../migration/target.js';

export interface RunnerPodFacts {
  vm: VirtualMachine;
  /** The VM's runner pods (by its labels), whatever their names. */
  pods: V1Pod[];
  /** Names the apiserver said just now that no pod has (a lookup after `verify`). */
  absent?: ReadonlySet<string>;
  /** What a node tells (from the cache). */
  node: (name: string) => NodeFacts;
}

export interface RunnerPodPlan {
  /** The pod that runs (or is to run, or last ran) the VM; its state goes into the VM's status. */
  current?: V1Pod;
  /** Pods to delete (gracefully): the VM is to be stopped. */
  stop: V1Pod[];
  /** Pods whose node is gone for sure: removed at once, nothing of them runs anymore. */
  forget?: V1Pod[];
  /** Make a runner pod of this name (once the status names it). */
  create?: string;
  /** The status names this pod, the cache does not have it: look it up before anything else. */
  verify?: string;
  /** Why no pod is made yet. */
  waiting?: string;
}

/** The name of a VM's runner pod when none runs: the VM's own (VM-Operator's). */
export const runnerPodName = (vm: VirtualMachine) => vm.metadata.name;

const terminating = (pod: V1Pod) => pod.metadata?.deletionTimestamp !== undefined;

/** The pod the VM's status names, else its one pod that is not being deleted (one from before the status named it). */
export function currentRunnerPod(vm: VirtualMachine, pods: V1Pod[]): V1Pod | undefined {
  const named = vm.status?.runnerPod?.name;
  const byName = named ? pods.find((pod) => pod.metadata?.name === named) : undefined;
  if (byName) return byName;
  // A migration's target runs the guest only once the status names it.
  const live = pods.filter((pod) => !terminating(pod) && !isMigrationTarget(pod));
  return live.length === 1 ? live[0] : undefined;
}

export function planRunnerPods(facts: RunnerPodFacts): RunnerPodPlan {
  const { vm } = facts;
  const onLostNode = (pod: V1Pod) =>
    pod.spec?.nodeName !== undefined && isGoneForSure(facts.node(pod.spec.nodeName));
  const forget = facts.pods.filter(onLostNode);
  if (forget.length > 0) {
    // Their deletion brings the key back; then the VM is planned without them.
    const current = currentRunnerPod(vm, facts.pods);
    return { current, stop: [], forget, waiting: 'the runner pod of a node that is gone is removed' };
  }
  const { pods } = facts;
  const current = currentRunnerPod(vm, pods);
  if (vm.spec.vm.state !== 'Running') return { current, stop: pods.filter((pod) => !terminating(pod)) };
  if (current && !terminating(current)) return { current, stop: [] };
  const leaving = pods.find(terminating);
  if (leaving) {
    return {
      current,
      stop: [],
      waiting: `the runner pod ${leaving.metadata!.name} is shutting down; a VM never runs twice`,
    };
  }
  const other = pods.find((pod) => !terminating(pod));
  if (other) {
    return {
      current,
      stop: [],
      waiting: `the runner pod ${other.metadata!.name} is still there; a VM never runs twice`,
    };
  }
  const named = vm.status?.runnerPod?.name;
  if (named && !pods.some((pod) => pod.metadata?.name === named) && !facts.absent?.has(named))
    return { current, stop: [], verify: named };
  return { current, stop: [], create: runnerPodName(vm) };
}
