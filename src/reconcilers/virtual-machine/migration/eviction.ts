// What a node drain does to a VM (pure). Kubernetes says a node goes into maintenance with a
// cordon (`kubectl drain` cordons first) and then evicts its pods through the eviction API. A VM
// that moves live on eviction has a PodDisruptionBudget that refuses the eviction of its runner
// pod (drain retries), and vmop, seeing the node cordoned, moves it with a Migrate operation of its
// own; the source pod then goes and the drain completes. A VM that cannot (or may not) move live
// has no budget: the eviction shuts it down for a start elsewhere.
import type { V1PodDisruptionBudget, V1Pod } from '@kubernetes/client-node';
import { OPERATION_KIND, type VirtualMachineOperation } from '../../../api/virtual-machine-operation.js';
import { API_VERSION, type EvictionStrategy, type VirtualMachine } from '../../../api/virtual-machine.js';
import { OPERATION_VM_LABEL } from '../../virtual-machine-operation/operations.js';
import { LABEL_COMPONENT, OPERATION_ANNOTATION, ownerReference, vmLabels } from '../naming.js';
import type { NodeFacts } from '../node-facts.js';
import { RUNNER_COMPONENT } from '../runner-pod/pod.js';
import type { Migratability } from './migratable.js';

/**
 * Whether an eviction moves the VM live (and so is refused until vmop moved it): if possible, when
 * it can migrate and another node could take it now; LiveMigrate: always (never evicted
 * otherwise, also while it cannot move: KubeVirt's meaning).
 */
export function movesLiveOnEviction(
  vm: VirtualMachine,
  migratable: Migratability,
  defaultStrategy: EvictionStrategy,
  otherNodeReady: boolean,
): boolean {
  const strategy = vm.spec.evictionStrategy ?? defaultStrategy;
  if (strategy === 'LiveMigrate') return true;
  return strategy === 'LiveMigrateIfPossible' && migratable.migratable && otherNodeReady;
}

/**
 * The budget that makes the eviction API refuse to evict the VM's runner pods: all of them must stay
 * (its one pod, or source and target while it moves, as KubeVirt's budgets). An integer
 * minAvailable, because the disruption controller computes maxUnavailable (and percentages) from
 * the pods' controller's scale subresource, which a VirtualMachine does not have: it then fails
 * the budget ("CalculateExpectedPodCountFailed") and refuses evictions only by its fail-safe.
 */
export function disruptionBudget(vm: VirtualMachine, migrating = false): V1PodDisruptionBudget {
  const labels = vmLabels(vm.metadata.name);
  return {
    apiVersion: 'policy/v1',
    kind: 'PodDisruptionBudget',
    metadata: {
      name: vm.metadata.name,
      namespace: vm.metadata.namespace,
      labels,
      ownerReferences: [ownerReference(vm)],
    },
    spec: {
      minAvailable: migrating ? 2 : 1,
      selector: { matchLabels: { ...labels, [LABEL_COMPONENT]: RUNNER_COMPONENT } },
    },
  };
}

/** The Migrate operation that moves a VM off its cordoned node (one per runner pod). */
export function evacuation(vm: VirtualMachine, pod: V1Pod): VirtualMachineOperation {
  return {
    apiVersion: API_VERSION,
    kind: OPERATION_KIND,
    metadata: {
      name: `${vm.metadata.name}-evacuate-${pod.metadata!.uid!.replaceAll('-', '').slice(0, 8)}`,
      namespace: vm.metadata.namespace,
      labels: { [OPERATION_VM_LABEL]: vm.metadata.name },
      ownerReferences: [{ ...ownerReference(vm), controller: false }],
    },
    spec: { virtualMachineName: vm.metadata.name, type: 'Migrate' },
  };
}

export interface EvictionFacts {
  vm: VirtualMachine;
  pod?: V1Pod;
  node?: NodeFacts;
  migratable: Migratability;
  defaultStrategy: EvictionStrategy;
  /** The evacuation of this pod, if one was made (it may have failed). */
  evacuation?: VirtualMachineOperation;
  /** A migration is under way. */
  migrating: boolean;
  /** Another node is ready and schedulable (a migration could go there). */
  otherNodeReady: boolean;
}

export interface EvictionPlan {
  /** The VM's PodDisruptionBudget should exist. */
  budget: boolean;
  /** Make this Migrate operation: the VM's node is cordoned. */
  evacuate?: VirtualMachineOperation;
}

export function planEviction(facts: EvictionFacts): EvictionPlan {
  const { vm, pod } = facts;
  const runs = vm.spec.vm.state === 'Running' && pod !== undefined && !pod.metadata?.deletionTimestamp;
  const live = movesLiveOnEviction(vm, facts.migratable, facts.defaultStrategy, facts.otherNodeReady);
  if (!runs || !live) return { budget: false };
  const failed = facts.evacuation?.status?.phase === 'Failed';
  const strategy = vm.spec.evictionStrategy ?? facts.defaultStrategy;
  // If possible: once moving live failed, the drain may shut it down instead.
  const budget = !(failed && strategy === 'LiveMigrateIfPossible');
  const cordoned = facts.node?.unschedulable === true && facts.node.state === 'Ready';
  const busy = facts.migrating || vm.metadata.annotations?.[OPERATION_ANNOTATION] !== undefined;
  if (cordoned && !facts.evacuation && !busy && facts.migratable.migratable)
    return { budget, evacuate: evacuation(vm, pod) };
  return { budget };
}
