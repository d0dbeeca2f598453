// What each VirtualMachineOperation type may do, does and waits for (pure): the rules of
// Deckhouse's VMOP on vmop's VM (its run policy, phase and status).
import {
  OPERATION_KIND,
  type OperationType,
  type VirtualMachineOperation,
} from '../../api/virtual-machine-operation.js';
import {
  API_VERSION,
  type EvictionStrategy,
  type RunPolicy,
  type VirtualMachine,
} from '../../api/virtual-machine.js';
import { canTakeVms, type NodeFacts } from '../virtual-machine/node-facts.js';
import { ownerReference } from '../virtual-machine/naming.js';
import { FORCED_GRACE_SECONDS } from '../virtual-machine/runner-pod/pod.js';
import { kubeTime } from '../../kube/time.js';

/** On an operation: the VM it is for (to list a VM's operations). */
export const OPERATION_VM_LABEL = 'vmoperator.jdrupes.org/vm';

/** Finished operations kept per VM, and for how long (Deckhouse's defaults). */
export const KEEP_FINISHED = { count: 10, ms: 24 * 60 * 60 * 1000 };

export interface Outcome {
  reason: string;
  message: string;
}

const ALL_BUT_ALWAYS_OFF: Array<RunPolicy | undefined> = [
  undefined,
  'Manual',
  'AlwaysOnUnlessStoppedManually',
  'AlwaysOn',
];
const POLICIES: Record<OperationType, Array<RunPolicy | undefined>> = {
  // AlwaysOn: it runs anyway, and stopping it is not the user's to decide; AlwaysOff: nothing runs.
  Start: [undefined, 'Manual', 'AlwaysOnUnlessStoppedManually'],
  Stop: [undefined, 'Manual', 'AlwaysOnUnlessStoppedManually'],
  Restart: ALL_BUT_ALWAYS_OFF,
  Reset: ALL_BUT_ALWAYS_OFF,
  Evict: ALL_BUT_ALWAYS_OFF,
  Migrate: ALL_BUT_ALWAYS_OFF,
};

/** What an operation needs to know beyond the VM: the cluster's nodes, the manager's defaults. */
export interface OperationContext {
  nodes: NodeFacts[];
  evictionStrategy: EvictionStrategy;
}

/** No nodes known, the chart's default strategy. */
const NO_CONTEXT: OperationContext = { nodes: [], evictionStrategy: 'LiveMigrateIfPossible' };

/** Why the VM cannot move live now (undefined: it can), for Migrate and Evict. */
export function liveMigrationObstacle(
  op: VirtualMachineOperation,
  vm: VirtualMachine,
  context: OperationContext,
): string | undefined {
  const migratable = vm.status?.conditions?.find((c) => c.type === 'Migratable');
  if (migratable?.status !== 'True')
    return migratable?.message ?? 'the VM cannot migrate (no Migratable condition yet)';
  const here = vm.status?.node;
  const wanted = op.spec.migrate?.nodeName;
  const usable = (node: NodeFacts) => canTakeVms(node, here);
  if (wanted) {
    const node = context.nodes.find((n) => n.name === wanted);
    if (wanted === here) return `the VM runs on ${wanted} already`;
    if (!node || !usable(node))
      return `node ${wanted} is not ready to take VMs (absent, not ready or cordoned)`;
    return undefined;
  }
  return context.nodes.some(usable)
    ? undefined
    : `no other node is ready to take the VM (it runs on ${here})`;
}

/** Whether an Evict moves the VM live (its evictionStrategy, and whether it can). */
export function evictsLive(op: VirtualMachineOperation, vm: VirtualMachine, context: OperationContext) {
  const strategy = vm.spec.evictionStrategy ?? context.evictionStrategy;
  if (strategy === 'None') return { live: false, why: 'its evictionStrategy is None' };
  const obstacle = liveMigrationObstacle(op, vm, context);
  return obstacle ? { live: false, why: obstacle } : { live: true, why: 'it can move live' };
}

/** An Evict that cannot move the VM live, though its evictionStrategy is LiveMigrate: refused. */
function strictEvictionRefusal(
  op: VirtualMachineOperation,
  vm: VirtualMachine,
  context: OperationContext,
): Outcome | undefined {
  if ((vm.spec.evictionStrategy ?? context.evictionStrategy) !== 'LiveMigrate') return undefined;
  const obstacle = liveMigrationObstacle(op, vm, context);
  return obstacle
    ? {
        reason: 'NotMigratable',
        message: `its evictionStrategy is LiveMigrate and it cannot move live: ${obstacle}`,
      }
    : undefined;
}

const phaseRefusal = (message: string): Outcome => ({
  reason: 'NotApplicableForVirtualMachinePhase',
  message,
});

/** Why the operation cannot be carried out on the VM as it is (it then fails at once), if so. */
export function refusal(
  op: VirtualMachineOperation,
  vm: VirtualMachine,
  context: OperationContext = NO_CONTEXT,
): Outcome | undefined {
  const { type, force } = op.spec;
  const policy = vm.spec.runPolicy;
  if (!POLICIES[type].includes(policy)) {
    return {
      reason: 'NotApplicableForVirtualMachineRunPolicy',
      message: `${type} is not applicable to a VM with runPolicy ${policy}`,
    };
  }
  const state = vm.spec.vm.state;
  const phase = vm.status?.phase ?? 'Pending';
  const is = `the VM is ${phase} (spec.vm.state ${state})`;
  switch (type) {
    case 'Start':
      // A failed VM (e.g. in its start back-off) starts afresh.
      return state === 'Running' && phase !== 'Failed' ? phaseRefusal(`${is}: it runs already`) : undefined;
    case 'Stop':
      if (state === 'Stopped' && !(force && phase === 'Stopping')) {
        return phaseRefusal(
          `${is}: it is stopped or stopping already${force ? '' : ' (force stops it at once)'}`,
        );
      }
      return undefined;
    case 'Restart':
      if (state !== 'Running') return phaseRefusal(`${is}: only a running VM restarts`);
      if (phase === 'Stopping' && !force)
        return phaseRefusal(`${is}: it is stopping (force restarts it at once)`);
      return phase === 'Pending' ? phaseRefusal(`${is}: it has not started yet`) : undefined;
    case 'Reset':
    case 'Evict':
      if (state !== 'Running' || phase !== 'Running')
        return phaseRefusal(`${is}: ${type} needs a running guest`);
      return type === 'Evict' ? strictEvictionRefusal(op, vm, context) : undefined;
    case 'Migrate': {
      if (state !== 'Running' || phase !== 'Running')
        return phaseRefusal(`${is}: only a running VM migrates`);
      const obstacle = liveMigrationObstacle(op, vm, context);
      return obstacle ? { reason: 'NotMigratable', message: obstacle } : undefined;
    }
  }
}

/** Whether `incoming` replaces `active` (which is then Superseded) instead of failing for it. */
export function supersedes(active: VirtualMachineOperation, incoming: VirtualMachineOperation): boolean {
  const a = active.spec;
  const b = incoming.spec;
  const stopOrRestart = (type: OperationType) => type === 'Stop' || type === 'Restart';
  if (a.type === 'Start') return b.type === 'Stop';
  if (a.type === 'Evict' || a.type === 'Migrate') return stopOrRestart(b.type);
  if (stopOrRestart(a.type) && !a.force) return stopOrRestart(b.type) && b.force === true;
  return false;
}

export interface Signal {
  /** The VM's spec.vm.state to write. */
  state?: 'Running' | 'Stopped';
  /** Delete the runner pod; with a grace period (seconds) when forced. */
  deletePod?: { gracePeriodSeconds?: number };
  /** Evict the runner pod through the eviction API. */
  evictPod?: boolean;
  /** Ask the runner for a reset. */
  reset?: boolean;
  /** Move the guest live (the VM's migrate annotation). */
  migrate?: boolean;
}

/** What tells the VM to carry out the operation (an Evict decided live or cold: op.status.live). */
export function signalFor(op: VirtualMachineOperation, vm: VirtualMachine): Signal {
  const forced = op.spec.force ? { gracePeriodSeconds: FORCED_GRACE_SECONDS } : {};
  switch (op.spec.type) {
    case 'Start':
      return vm.spec.vm.state === 'Stopped' ? { state: 'Running' } : { deletePod: {} };
    case 'Stop':
      return { state: 'Stopped', ...(op.spec.force && { deletePod: forced }) };
    case 'Restart':
      return { deletePod: forced };
    case 'Reset':
      return { reset: true };
    case 'Evict':
      return op.status?.live ? { migrate: true } : { evictPod: true };
    case 'Migrate':
      return { migrate: true };
  }
}

/**
 * The outcome, read from the VM's status, of an operation that was signalled; undefined while it
 * is still in progress.
 */
export function completion(op: VirtualMachineOperation, vm: VirtualMachine): Outcome | undefined {
  const status = vm.status ?? {};
  const { type } = op.spec;
  const signalledAt = op.status?.signalledAt ?? '';
  const running = status.conditions?.find((c) => c.type === 'Running');
  // Failed since the signal: in a runner pod made after it (Running stays False from a failed
  // start to the next, so its transition time cannot tell), or by a transition after it.
  const newPod = status.runner?.podUid !== undefined && status.runner.podUid !== op.status?.podUid;
  const failedSince =
    status.phase === 'Failed' && running && (newPod || running.lastTransitionTime >= kubeTime(signalledAt));
  const done = (message: string): Outcome => ({ reason: 'OperationCompleted', message });
  const failed = (message: string): Outcome => ({ reason: 'OperationFailed', message });
  switch (type) {
    case 'Start':
      if (vm.spec.vm.state !== 'Running') return failed('spec.vm.state was set to Stopped meanwhile');
      if (status.phase === 'Running') return done(`the VM runs on ${status.node ?? 'its node'}`);
      return failedSince ? failed(running!.message) : undefined;
    case 'Stop':
      if (vm.spec.vm.state !== 'Stopped') return failed('spec.vm.state was set to Running meanwhile');
      return status.phase === 'Stopped' ? done('the VM is stopped') : undefined;
    case 'Migrate':
      return migrationOutcome(op, vm);
    case 'Evict':
      if (op.status?.live) return migrationOutcome(op, vm);
    // falls through: moved cold
    case 'Restart': {
      if (newPod && status.phase === 'Running') {
        const cold =
          type === 'Evict' && op.status?.liveReason ? `moved cold, as ${op.status.liveReason}: ` : '';
        return done(`${cold}the VM runs again, in a new runner pod on ${status.node ?? 'its node'}`);
      }
      if (vm.spec.vm.state !== 'Running') return failed('spec.vm.state was set to Stopped meanwhile');
      return failedSince ? failed(running!.message) : undefined;
    }
    case 'Reset':
      if (status.lastReset?.request === op.metadata.name) return done('the guest was reset');
      return status.phase === 'Running' ? undefined : failed(`the VM stopped running (${status.phase})`);
  }
}

/** A live migration's outcome, from the VM's status.migrationState. */
function migrationOutcome(op: VirtualMachineOperation, vm: VirtualMachine): Outcome | undefined {
  const state = vm.status?.migrationState;
  if (!state || state.id !== op.status?.migrationId || !state.result) return undefined;
  if (state.result === 'Failed')
    return {
      reason: 'OperationFailed',
      message: `${state.message ?? 'the migration failed'}; the VM runs on where it was`,
    };
  const downtime = state.downtimeMs !== undefined ? ` (the guest paused ${state.downtimeMs} ms)` : '';
  return {
    reason: 'OperationCompleted',
    message: `moved live from ${state.sourceNode} to ${state.targetNode}${downtime}`,
  };
}

/** The Restart operation vmop creates itself under restartApprovalMode Automatic (one per generation). */
export function automaticRestart(vm: VirtualMachine): VirtualMachineOperation {
  return {
    apiVersion: API_VERSION,
    kind: OPERATION_KIND,
    metadata: {
      name: `${vm.metadata.name}-auto-restart-${vm.metadata.generation ?? 0}`,
      namespace: vm.metadata.namespace,
      labels: { [OPERATION_VM_LABEL]: vm.metadata.name },
      ownerReferences: [{ ...ownerReference(vm), controller: false }],
    },
    spec: { virtualMachineName: vm.metadata.name, type: 'Restart' },
  };
}
