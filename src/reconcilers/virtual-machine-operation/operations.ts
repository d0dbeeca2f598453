// What each VirtualMachineOperation type may do, does and waits for (pure): the rules of
// Deckhouse's VMOP on vmop's VM (its run policy, phase and status).
import {
  OPERATION_KIND,
  type OperationType,
  type VirtualMachineOperation,
} from '../../api/virtual-machine-operation.js';
import { API_VERSION, type RunPolicy, type VirtualMachine } from '../../api/virtual-machine.js';
import { ownerReference } from '../virtual-machine/naming.js';
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
};

const phaseRefusal = (message: string): Outcome => ({
  reason: 'NotApplicableForVirtualMachinePhase',
  message,
});

/** Why the operation cannot be carried out on the VM as it is (it then fails at once), if so. */
export function refusal(op: VirtualMachineOperation, vm: VirtualMachine): Outcome | undefined {
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
      return state === 'Running' && phase === 'Running'
        ? undefined
        : phaseRefusal(`${is}: ${type} needs a running guest`);
  }
}

/** Whether `incoming` replaces `active` (which is then Superseded) instead of failing for it. */
export function supersedes(active: VirtualMachineOperation, incoming: VirtualMachineOperation): boolean {
  const a = active.spec;
  const b = incoming.spec;
  const stopOrRestart = (type: OperationType) => type === 'Stop' || type === 'Restart';
  if (a.type === 'Start') return b.type === 'Stop';
  if (a.type === 'Evict') return stopOrRestart(b.type);
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
}

/** What tells the VM to carry out the operation. */
export function signalFor(op: VirtualMachineOperation, vm: VirtualMachine): Signal {
  // One second: kubelet sends SIGTERM (the runner presses the power button) and kills it a second later.
  const forced = op.spec.force ? { gracePeriodSeconds: 1 } : {};
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
      return { evictPod: true };
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
    case 'Restart':
    case 'Evict': {
      if (newPod && status.phase === 'Running') {
        return done(`the VM runs again, in a new runner pod on ${status.node ?? 'its node'}`);
      }
      if (vm.spec.vm.state !== 'Running') return failed('spec.vm.state was set to Stopped meanwhile');
      return failedSince ? failed(running!.message) : undefined;
    }
    case 'Reset':
      if (status.lastReset?.request === op.metadata.name) return done('the guest was reset');
      return status.phase === 'Running' ? undefined : failed(`the VM stopped running (${status.phase})`);
  }
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
