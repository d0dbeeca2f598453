// Folds what the cluster and the VM's runner show into the VM's status. Pure: the reconciler
// supplies the facts (the runner pod, the runner's latest snapshot, spec problems, the time).
import type { V1Pod } from '@kubernetes/client-node';
import type { RunnerSnapshot } from '../../api/runner-snapshot.js';
import type { Condition, VirtualMachine, VirtualMachineStatus, VmPhase } from '../../api/virtual-machine.js';

export interface ObservedState {
  /** The runner pod `<vm>-0`, if it exists. */
  pod?: V1Pod;
  /** The runner's latest snapshot from Redis, whichever pod it came from. */
  snapshot?: RunnerSnapshot;
  /** Problems with the spec that the CRD schema cannot catch; owned objects are left alone. */
  specErrors: string[];
  now: Date;
}

type ConditionFacts = Pick<Condition, 'type' | 'status' | 'reason' | 'message'>;
interface PhaseFacts {
  phase: VmPhase;
  reason: string;
  message: string;
}

/**
 * The snapshot counts only when it comes from the runner in the current pod (a restarted pod
 * reuses the name, not the uid) and is not older than the one already folded into the status.
 */
export function currentSnapshot(
  snapshot: RunnerSnapshot | undefined,
  pod: V1Pod | undefined,
  status: VirtualMachineStatus | undefined,
): RunnerSnapshot | undefined {
  if (!snapshot || !pod?.metadata) return undefined;
  if (snapshot.pod !== pod.metadata.name || snapshot.podUid !== pod.metadata.uid) return undefined;
  const folded = status?.runner;
  if (folded && folded.runId === snapshot.runId && snapshot.seq < folded.seq) return undefined;
  return snapshot;
}

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

function podPhase(vm: VirtualMachine, pod: V1Pod | undefined): PhaseFacts {
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
      return {
        phase: 'Starting',
        reason: 'RunnerStarting',
        message: `the runner runs on ${pod.spec?.nodeName}`,
      };
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

function runnerPhase(vm: VirtualMachine, pod: V1Pod, snapshot: RunnerSnapshot): PhaseFacts {
  if (pod.metadata?.deletionTimestamp && snapshot.phase !== 'stopped') {
    return { phase: 'Stopping', reason: 'PodTerminating', message: 'the runner is shutting the VM down' };
  }
  switch (snapshot.phase) {
    case 'starting':
      return { phase: 'Starting', reason: 'RunnerStarting', message: 'qemu is starting' };
    case 'booting':
      return { phase: 'Running', reason: 'QemuRunning', message: 'qemu runs, the guest is booting' };
    case 'running':
      return { phase: 'Running', reason: 'GuestRunning', message: 'the guest has booted' };
    case 'stopping':
      return { phase: 'Stopping', reason: 'ShuttingDown', message: 'the guest is shutting down' };
    case 'stopped':
      return vm.spec.vm.state === 'Running' && !snapshot.lastShutdown?.guest
        ? { phase: 'Starting', reason: 'Restarting', message: 'qemu stopped; the runner restarts' }
        : { phase: 'Stopped', reason: 'Stopped', message: shutdownMessage(snapshot) };
    case 'failed':
      return { phase: 'Failed', reason: 'RunnerFailed', message: snapshot.message ?? 'the runner failed' };
  }
}

function shutdownMessage(snapshot: RunnerSnapshot): string {
  const shutdown = snapshot.lastShutdown;
  if (!shutdown) return 'qemu stopped';
  return shutdown.guest ? 'the guest powered itself off' : `qemu stopped (${shutdown.reason})`;
}

/** Bytes as a Kubernetes quantity, in the largest binary unit that divides them. */
export function formatBytes(bytes: number): string {
  for (const [unit, size] of [
    ['Ti', 2 ** 40],
    ['Gi', 2 ** 30],
    ['Mi', 2 ** 20],
    ['Ki', 2 ** 10],
  ] as const) {
    if (bytes >= size && bytes % size === 0) return `${bytes / size}${unit}`;
  }
  return String(bytes);
}

export function deriveStatus(vm: VirtualMachine, observed: ObservedState): VirtualMachineStatus {
  const generation = vm.metadata.generation ?? 0;
  const previous = vm.status;
  const { pod, now } = observed;
  const snapshot = currentSnapshot(observed.snapshot, pod, previous);
  const facts = snapshot && pod ? runnerPhase(vm, pod, snapshot) : podPhase(vm, pod);
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
    status: facts.phase === 'Running' ? 'True' : 'False',
    reason: facts.reason,
    message: facts.message,
  };
  const booted: ConditionFacts =
    facts.phase === 'Running' && snapshot?.booted
      ? { type: 'Booted', status: 'True', reason: 'GuestBooted', message: 'the guest opened its agent port' }
      : { type: 'Booted', status: 'False', reason: 'NotBooted', message: 'the guest has not (yet) booted' };
  const stopped = facts.phase === 'Stopped';
  const lastShutdown = snapshot?.lastShutdown
    ? {
        guestInitiated: snapshot.lastShutdown.guest,
        reason: snapshot.lastShutdown.reason,
        time: snapshot.lastShutdown.at,
      }
    : previous?.lastShutdown;
  return {
    phase: facts.phase,
    observedGeneration: generation,
    conditions: [specValid, running, booted].map((c) => condition(previous?.conditions, c, generation, now)),
    ...(pod?.spec?.nodeName && !stopped && { node: pod.spec.nodeName }),
    ...(snapshot && !stopped && { cpus: snapshot.cpus, ram: formatBytes(snapshot.ram) }),
    ...(stopped && { cpus: 0, ram: '0' }),
    ...(snapshot?.displayPasswordSerial !== undefined && {
      displayPasswordSerial: snapshot.displayPasswordSerial,
    }),
    ...(snapshot && { consoleClient: snapshot.consoleClient?.host ?? '' }),
    ...(lastShutdown && { lastShutdown }),
    ...(snapshot && { runner: { runId: snapshot.runId, seq: snapshot.seq } }),
  };
}

export interface StatusEvent {
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
}

/**
 * Kubernetes Events for the transitions between two statuses of a VM. A shutdown while the VM's
 * desired state is Stopped was requested (the guest obeyed the power button); otherwise the guest
 * (or a host-side failure) ended it.
 */
export function transitionEvents(
  before: VirtualMachineStatus | undefined,
  after: VirtualMachineStatus,
  desiredState: VirtualMachine['spec']['vm']['state'],
): StatusEvent[] {
  const events: StatusEvent[] = [];
  if (after.phase === 'Running' && before?.phase !== 'Running') {
    events.push({ type: 'Normal', reason: 'Started', message: `the VM runs on ${after.node ?? 'its node'}` });
  }
  const shutdown = after.lastShutdown;
  if (shutdown && shutdown.time !== before?.lastShutdown?.time) {
    if (desiredState === 'Stopped') {
      events.push({
        type: 'Normal',
        reason: 'StoppedByRequest',
        message: `the VM was stopped (${shutdown.reason})`,
      });
    } else if (shutdown.guestInitiated) {
      events.push({ type: 'Normal', reason: 'StoppedByGuest', message: 'the guest powered itself off' });
    } else {
      events.push({ type: 'Warning', reason: 'StoppedByHost', message: `qemu stopped (${shutdown.reason})` });
    }
  } else if (after.phase === 'Stopped' && before?.phase && before.phase !== 'Stopped') {
    events.push({ type: 'Normal', reason: 'Stopped', message: 'the VM is stopped' });
  }
  if (after.phase === 'Failed' && before?.phase !== 'Failed') {
    const message = after.conditions?.find((c) => c.type === 'Running')?.message ?? 'the VM failed';
    events.push({ type: 'Warning', reason: 'Failed', message });
  }
  return events;
}

/**
 * guestShutdownStops: when the guest powered itself off, the VM is to stay off, so its desired
 * state becomes Stopped (VM-Operator's runner does this itself; here the operator does all writes).
 */
export function stopsAfterGuestShutdown(vm: VirtualMachine, observed: ObservedState): boolean {
  const snapshot = currentSnapshot(observed.snapshot, observed.pod, vm.status);
  return (
    vm.spec.guestShutdownStops &&
    vm.spec.vm.state === 'Running' &&
    snapshot?.lastShutdown?.guest === true &&
    (snapshot.phase === 'stopping' || snapshot.phase === 'stopped')
  );
}
