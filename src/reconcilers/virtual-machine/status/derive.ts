// Folds what the cluster and the VM's runner show into the VM's status. Pure: the reconciler
// supplies the facts (the runner pod, the runner's latest snapshot, spec problems, the time).
import type { IpAddressPlan } from '../address/ip-address.js';
import { runnerImageOf } from '../runner-pod/facts.js';
import type { V1ContainerStatus, V1ContainerStateTerminated, V1Pod } from '@kubernetes/client-node';
import type { RunnerSnapshot } from '../../../api/runner-snapshot.js';
import type {
  Condition,
  MigrationState,
  RestartAwaitingChange,
  VirtualMachine,
  VirtualMachineStatus,
  VmPhase,
} from '../../../api/virtual-machine.js';
import { runnerContainer } from '../runner-pod/facts.js';
import type { NodeFacts } from '../node-facts.js';
import { formatBytes } from '../../../api/runner-config.js';
import type { ObjectEvent } from '../../events.js';
import { restartAwaitingChanges } from '../lifecycle/restart-awaiting.js';
import { specPathOfRunnerField } from '../runner-config/config.js';
import { isBackingOff, nextStartFailure } from '../lifecycle/start-backoff.js';
import { kubeTime } from '../../../kube/time.js';
import { CLASS_LABEL } from '../../../api/virtual-machine-class.js';
import { POD_SPEC_ANNOTATION } from '../naming.js';
import type { Migratability } from '../migration/migratable.js';
import type { DiskSizes } from '../disks/sizes.js';

export interface ObservedState {
  /** The VM's current runner pod (runner-pod/plan.ts), if it exists. */
  pod?: V1Pod;
  /** The name of the runner pod vmop is about to make (named in the status first). */
  creatingPod?: string;
  /** What the current pod's node tells. */
  node?: NodeFacts;
  /** The runner's latest snapshot from Redis, whichever pod it came from. */
  snapshot?: RunnerSnapshot;
  /** Problems with the spec that the CRD schema cannot catch; owned objects are left alone. */
  specErrors: string[];
  /** The apiserver's refusal of an object vmop made for the VM (retrying cannot help). */
  rejected?: string;
  /** The VM's LoadBalancer Service, when it wants one. */
  loadBalancer?: LoadBalancerState;
  /** configDigest() of the config the runner should have: a runner's config error counts only for it. */
  configDigest?: string;
  /** The VM's live migration (migration/plan.ts) and whether it can migrate. */
  migration?: { state?: MigrationState; migrating: boolean; migratable: Migratability };
  /** Its disks' claims and sizes (disks/sizes.ts). */
  disks?: Pick<DiskSizes, 'statuses' | 'condition'>;
  /**
   * Why no runner pod is made yet: its disks are being imported, or an import failed
   * (disks/imports.ts), or its claims are not bound yet (disks/claim-binding.ts).
   */
  waiting?: { reason: string; message: string };
  /** The pod runs an older runner image than the default one the VM takes. */
  outdatedRunner?: boolean;
  /** The VM as its runner pod is made from it (with its class's settings), when not the VM itself. */
  runnerVm?: VirtualMachine;
  /** The VM's own IP address, where it has one (or waits for one). */
  ipAddress?: IpAddressPlan;
  now: Date;
}

type ConditionFacts = Pick<Condition, 'type' | 'status' | 'reason' | 'message'>;
interface PhaseFacts {
  phase: VmPhase;
  reason: string;
  message: string;
}

/** Whole seconds, as kubelet reports a container's start. */
const floorToSecond = (time: Date | string) => Math.floor(new Date(time).getTime() / 1000) * 1000;
/**
 * How much earlier than its container's reported start a runner may say it started. The runner's
 * start is its process's; containerd notes the container's after it has started the process, and
 * kubelet reports that in whole seconds: a process started at …:24.998 has a container "started
 * at" …:25, later than itself. On a busy node the gap was enough that a VM's runner was never
 * taken for its container's and the VM stayed Starting (a whole run's back-off test).
 */
const CONTAINER_START_SLACK_MS = 2_000;

/**
 * The snapshot counts only when it comes from the runner in the current pod (a restarted pod
 * reuses the name, not the uid) and its current container (a restarted runner has not reported
 * yet when the old one's snapshot is still there: the old runner started well before the new
 * container did), and is not older than the one folded in.
 */
export function currentSnapshot(
  snapshot: RunnerSnapshot | undefined,
  pod: V1Pod | undefined,
  status: VirtualMachineStatus | undefined,
): RunnerSnapshot | undefined {
  if (!snapshot || !pod?.metadata) return undefined;
  if (snapshot.pod !== pod.metadata.name || snapshot.podUid !== pod.metadata.uid) return undefined;
  const containerStarted = runnerContainer(pod)?.state?.running?.startedAt;
  if (
    containerStarted &&
    snapshot.startedAt &&
    new Date(snapshot.startedAt).getTime() < floorToSecond(containerStarted) - CONTAINER_START_SLACK_MS
  ) {
    return undefined;
  }
  const folded = status?.runner;
  if (folded && folded.runId === snapshot.runId && snapshot.seq < folded.seq) return undefined;
  return snapshot;
}

/**
 * The last snapshot of the run the status folded last, once its pod is gone, if it says how the
 * guest stopped. The runner says so and exits; its pod can be gone from the cache before that
 * snapshot's reconcile runs (a whole run saw a VM Stopped with no lastShutdown).
 */
function lastWords(
  snapshot: RunnerSnapshot | undefined,
  pod: V1Pod | undefined,
  status: VirtualMachineStatus | undefined,
): RunnerSnapshot | undefined {
  const folded = status?.runner;
  if (pod || !snapshot?.lastShutdown || !folded) return undefined;
  if (snapshot.runId !== folded.runId || snapshot.podUid !== folded.podUid) return undefined;
  return snapshot.seq > folded.seq ? snapshot : undefined;
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
    before && before.status === facts.status ? before.lastTransitionTime : kubeTime(now);
  return { ...facts, observedGeneration: generation, lastTransitionTime };
}

function podPhase(
  vm: VirtualMachine,
  pod: V1Pod | undefined,
  noPodYet?: ObservedState['waiting'],
): PhaseFacts {
  const wantRunning = vm.spec.vm.state === 'Running';
  if (!pod) {
    if (wantRunning && noPodYet) return { phase: 'Pending', ...noPodYet };
    return wantRunning
      ? { phase: 'Pending', reason: 'PodNotCreated', message: 'waiting for the runner pod to be created' }
      : { phase: 'Stopped', reason: 'Stopped', message: 'the VM is stopped' };
  }
  if (pod.metadata?.deletionTimestamp || !wantRunning) {
    return { phase: 'Stopping', reason: 'PodTerminating', message: 'the runner pod is shutting down' };
  }
  const waiting = runnerContainer(pod)?.state?.waiting;
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
      if (waiting?.reason && waiting.reason !== 'ContainerCreating') {
        // e.g. ErrImagePull, ImagePullBackOff, CreateContainerConfigError: kubelet says why.
        return {
          phase: 'Starting',
          reason: waiting.reason,
          message: `the runner container cannot start: ${waiting.message ?? waiting.reason}`,
        };
      }
      return pod.spec?.nodeName
        ? {
            phase: 'Starting',
            reason: 'PodStarting',
            message: `the runner pod is starting on ${pod.spec.nodeName}`,
          }
        : { phase: 'Pending', ...unscheduled(pod) };
  }
}

/**
 * Why the pod waits for a node, in the scheduler's own words (e.g. "0/1 nodes are available: …"),
 * with KubeVirt's reasons for its volumes (ErrorPvcNotFound, WaitingForVolumeBinding).
 */
function unscheduled(pod: V1Pod): { reason: string; message: string } {
  const scheduled = pod.status?.conditions?.find((c) => c.type === 'PodScheduled');
  if (scheduled?.status !== 'False' || !scheduled.message) {
    return { reason: 'PodUnscheduled', message: 'the runner pod waits for a node' };
  }
  const words = scheduled.message;
  const reason = /persistentvolumeclaim "[^"]*" not found/i.test(words)
    ? 'PvcNotFound'
    : /unbound immediate PersistentVolumeClaims|persistent volumes to bind|bind volumes/i.test(words)
      ? 'WaitingForVolumeBinding'
      : 'PodUnscheduled';
  return { reason, message: `the runner pod cannot be scheduled: ${words}` };
}

function describeTermination(terminated: V1ContainerStateTerminated): string {
  if (terminated.signal) return `was killed by signal ${terminated.signal}`;
  // 128+n: a shell's way to say signal n; kubelet reports SIGKILL as exit code 137.
  if (terminated.exitCode > 128) return `was killed by signal ${terminated.exitCode - 128}`;
  return `exited with code ${terminated.exitCode}`;
}

/**
 * The runner container is not running although it ran before (killed, crashed, or waiting in
 * kubelet's restart back-off): whatever its last snapshot says, no qemu runs now.
 */
function stoppedContainerPhase(
  container: V1ContainerStatus,
  snapshot: RunnerSnapshot | undefined,
): PhaseFacts {
  const terminated = container.state?.terminated ?? container.lastState?.terminated;
  const waiting = container.state?.waiting;
  const restart = 'kubelet restarts it';
  if (terminated?.exitCode === 0) {
    return {
      phase: 'Starting',
      reason: 'Restarting',
      message: `the runner exited after qemu stopped; ${restart}`,
    };
  }
  const why = snapshot?.phase === 'failed' && snapshot.message ? ` (${snapshot.message})` : '';
  return {
    phase: 'Failed',
    reason: waiting?.reason ?? 'RunnerExited',
    message: `the runner ${terminated ? describeTermination(terminated) : 'stopped'}${why}; ${restart}`,
  };
}

function isStoppedContainer(container: V1ContainerStatus | undefined): container is V1ContainerStatus {
  if (!container || container.state?.running) return false;
  return container.restartCount > 0 || !!container.lastState?.terminated || !!container.state?.terminated;
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
        ? {
            phase: 'Starting',
            reason: 'Restarting',
            message: `${shutdownMessage(snapshot)}; the runner restarts`,
          }
        : { phase: 'Stopped', reason: 'Stopped', message: shutdownMessage(snapshot) };
    case 'failed':
      return { phase: 'Failed', reason: 'RunnerFailed', message: snapshot.message ?? 'the runner failed' };
  }
}

/**
 * No (current) snapshot, yet the pod and its runner container are the ones the last folded
 * snapshot came from and still run: the state store lost it (e.g. Redis restarted empty) or the
 * runner cannot reach it. The VM did not change; only the reporting stopped.
 */
function runnerWentQuiet(previous: VirtualMachineStatus | undefined, pod: V1Pod | undefined): boolean {
  const container = runnerContainer(pod);
  return (
    !!previous?.phase &&
    !!container?.state?.running &&
    !pod?.metadata?.deletionTimestamp &&
    previous.runner?.podUid !== undefined &&
    previous.runner.podUid === pod?.metadata?.uid &&
    (previous.runnerRestarts ?? 0) === container.restartCount
  );
}

function shutdownMessage(snapshot: RunnerSnapshot): string {
  const shutdown = snapshot.lastShutdown;
  if (!shutdown) return 'qemu stopped';
  return shutdown.guest ? 'the guest powered itself off' : qemuStopped(shutdown);
}

/** "qemu stopped (host-signal: … terminating on signal 15 from pid 42 (kill))": why, in qemu's words where it has them. */
function qemuStopped(shutdown: { reason: string; qemuSays?: string }): string {
  return `qemu stopped (${shutdown.reason}${shutdown.qemuSays ? `: ${shutdown.qemuSays}` : ''})`;
}

const RUNNER_REPORTING: ConditionFacts = {
  type: 'RunnerReporting',
  status: 'True',
  reason: 'Reporting',
  message: 'the runner reports the VM state',
};

/** How SpecValid (and its Warning Event) word the apiserver's refusal of an object vmop made. */
export function rejectionMessage(apiserverMessage: string): string {
  return `the apiserver refused an object made for this VM: ${apiserverMessage}`;
}

/** Whether the VM's own address is attached to it (Deckhouse's IPAddressReady). */
function ipAddressCondition(plan: IpAddressPlan): ConditionFacts {
  return plan.address
    ? {
        type: 'IPAddressReady',
        status: 'True',
        reason: 'Attached',
        message: `${plan.address} (VirtualMachineIPAddress ${plan.name})`,
      }
    : { type: 'IPAddressReady', status: 'False', ...plan.waiting! };
}

function specValidCondition(observed: ObservedState, snapshot: RunnerSnapshot | undefined): ConditionFacts {
  const errors = [...observed.specErrors];
  if (observed.rejected) errors.push(rejectionMessage(observed.rejected));
  const configError = snapshot?.configError;
  // Only for the config it was found in: an edit that fixed it must not stay reported as wrong.
  if (configError && snapshot.config === observed.configDigest) {
    errors.push(`${specPathOfRunnerField(configError.field)}: ${configError.message}`);
  }
  return errors.length === 0
    ? { type: 'SpecValid', status: 'True', reason: 'Valid', message: 'the spec can be run' }
    : {
        type: 'SpecValid',
        status: 'False',
        reason:
          observed.specErrors.length > 0
            ? 'InvalidSpec'
            : observed.rejected
              ? 'RejectedByApiserver'
              : 'RunnerRejectedSpec',
        message: errors.join('; '),
      };
}

export interface LoadBalancerState {
  ready: boolean;
  /** Why it is not. */
  message?: string;
}

export const LOAD_BALANCER_CONDITION = 'LoadBalancerServiceReady';

export const serviceNameTaken = (namespace: string, name: string) =>
  `the Service ${namespace}/${name} exists and was not made for this VM; vmop leaves it alone`;

/** Whether the status has the condition with this message (an Event for it was recorded then). */
export function hasCondition(
  status: VirtualMachineStatus | undefined,
  type: string,
  message: string,
): boolean {
  return status?.conditions?.some((c) => c.type === type && c.message === message) ?? false;
}

function loadBalancerCondition(state: LoadBalancerState): ConditionFacts {
  return state.ready
    ? {
        type: LOAD_BALANCER_CONDITION,
        status: 'True',
        reason: 'Applied',
        message: 'the LoadBalancer Service of the SPICE port is in place',
      }
    : { type: LOAD_BALANCER_CONDITION, status: 'False', reason: 'NameTaken', message: state.message ?? '' };
}

function nodeNotReadyPhase(node: NodeFacts): PhaseFacts {
  return {
    phase: 'Unknown',
    reason: 'NodeNotReady',
    message:
      `node ${node.name} is not ready${node.since ? ` since ${node.since}` : ''}: the VM may still run there; ` +
      `vmop starts it elsewhere only once the node is deleted or tainted node.kubernetes.io/out-of-service`,
  };
}

function nodeReachableCondition(node: NodeFacts): ConditionFacts {
  if (node.state === 'Ready')
    return {
      type: 'NodeReachable',
      status: 'True',
      reason: 'NodeReady',
      message: `node ${node.name} is ready`,
    };
  const { reason, message } = nodeNotReadyPhase(node);
  return { type: 'NodeReachable', status: 'False', reason, message };
}

const AWAITING_RESTART = 'AwaitingRestartToApplyConfiguration';

function awaitingRestartCondition(vm: VirtualMachine, awaiting: RestartAwaitingChange[]): ConditionFacts {
  if (awaiting.length === 0) {
    return {
      type: AWAITING_RESTART,
      status: 'False',
      reason: 'NoRestartRequired',
      message: 'no spec change waits for a restart',
    };
  }
  const next =
    vm.spec.disruptions?.restartApprovalMode === 'Automatic'
      ? 'vmop restarts the VM (restartApprovalMode Automatic)'
      : 'restart the VM to apply them (e.g. `vmop vm restart`)';
  return {
    type: AWAITING_RESTART,
    status: 'True',
    reason: 'ChangesPendingRestart',
    message: `changes that wait for a restart: ${awaiting.map((c) => c.path).join(', ')}; ${next}`,
  };
}

type Conditions = (facts: ConditionFacts[]) => Condition[];

/** The runner still runs but its reported state is gone (Redis lost it): the last known status stays. */
function lastKnownStatus(
  vm: VirtualMachine,
  observed: ObservedState,
  specValid: ConditionFacts,
  conditions: Conditions,
): VirtualMachineStatus {
  const previous = vm.status!;
  const kept = (type: string) => previous.conditions?.find((c) => c.type === type);
  return {
    ...previous,
    observedGeneration: vm.metadata.generation ?? 0,
    conditions: conditions([
      specValid,
      ...(['Running', 'Booted', AWAITING_RESTART] as const).flatMap((type) => kept(type) ?? []),
      {
        type: 'RunnerReporting',
        status: 'False',
        reason: 'NotReporting',
        message: 'the runner still runs but its reported state is missing; showing the last known state',
      },
      ...(observed.loadBalancer ? [loadBalancerCondition(observed.loadBalancer)] : []),
    ]),
  };
}

/** The VM's phase, and whether its node stopped reporting (then the VM may run there or not). */
function vmPhase(
  vm: VirtualMachine,
  observed: ObservedState,
  facts: { stoppedContainer: boolean; ownSnapshot?: RunnerSnapshot; snapshot?: RunnerSnapshot },
  startFailure: ReturnType<typeof nextStartFailure>,
): PhaseFacts & { unreachable?: NodeFacts } {
  const { pod } = observed;
  const { snapshot } = facts;
  const phase: PhaseFacts = facts.stoppedContainer
    ? stoppedContainerPhase(runnerContainer(pod)!, facts.ownSnapshot)
    : isBackingOff(startFailure, snapshot) && !pod?.metadata?.deletionTimestamp
      ? {
          phase: 'Failed' as const,
          reason: 'CrashLoopBackOff',
          message:
            `${snapshot?.message ?? 'the VM failed to start'}; ${startFailure.consecutiveFailCount} ` +
            `failed start(s) in a row, vmop starts it again at ${startFailure.retryAfter}`,
        }
      : snapshot && pod
        ? runnerPhase(vm, pod, snapshot)
        : podPhase(vm, pod, observed.waiting);
  const unreachable = observed.node && observed.node.state !== 'Ready' ? observed.node : undefined;
  if (unreachable) return { ...phase, ...nodeNotReadyPhase(unreachable), unreachable };
  // The guest runs (at the source, paused at the end, then at the target) while it moves.
  if (observed.migration?.migrating && (phase.phase === 'Running' || snapshot?.migration))
    return { ...phase, ...migratingPhase(observed.migration.state) };
  return phase;
}

/** Running, Booted, AgentConnected and RunnerReporting, from the phase and the runner's report. */
function guestConditions(
  phase: PhaseFacts & { unreachable?: NodeFacts },
  snapshot: RunnerSnapshot | undefined,
  hasPod: boolean,
): ConditionFacts[] {
  const guestRuns = phase.phase === 'Running' || phase.phase === 'Migrating';
  const agent = guestRuns ? snapshot?.guestAgent : undefined;
  const running: ConditionFacts = {
    type: 'Running',
    status: guestRuns ? 'True' : phase.unreachable ? 'Unknown' : 'False',
    reason: phase.reason,
    message: phase.message,
  };
  // Booted as VM-Operator means it (the guest agent answers), or the vmop agent port opened.
  const booted: ConditionFacts =
    guestRuns && (snapshot?.booted || agent?.connected)
      ? {
          type: 'Booted',
          status: 'True',
          reason: 'GuestBooted',
          message: agent?.connected ? 'the guest agent answers' : 'the guest opened its agent port',
        }
      : { type: 'Booted', status: 'False', reason: 'NotBooted', message: 'the guest has not (yet) booted' };
  const agentConnected: ConditionFacts = agent?.connected
    ? {
        type: 'AgentConnected',
        status: 'True',
        reason: 'AgentConnected',
        message: 'qemu-guest-agent answers',
      }
    : {
        type: 'AgentConnected',
        status: 'False',
        reason: 'AgentNotConnected',
        message: 'qemu-guest-agent does not run in the guest (or the guest does not run)',
      };
  const reporting: ConditionFacts = snapshot
    ? RUNNER_REPORTING
    : {
        type: 'RunnerReporting',
        status: 'False',
        reason: hasPod ? 'NotReporting' : 'NoRunner',
        message: hasPod ? 'no state from the runner of the current container yet' : 'no runner pod exists',
      };
  return [running, booted, agentConnected, reporting];
}

/**
 * What the runner reports of the guest and its qemu (none while no qemu runs), over what was known;
 * `last`, the last words of a runner whose pod is gone, say how its guest stopped.
 */
function reportedFields(
  snapshot: RunnerSnapshot | undefined,
  previous: VirtualMachineStatus | undefined,
  phase: PhaseFacts,
  last?: RunnerSnapshot,
): Partial<VirtualMachineStatus> {
  const guestRuns = phase.phase === 'Running' || phase.phase === 'Migrating';
  const agent = guestRuns ? snapshot?.guestAgent : undefined;
  const noQemu = phase.phase === 'Stopped' || phase.phase === 'Failed';
  const stopSaid = snapshot?.lastShutdown ? snapshot : last;
  const lastShutdown = stopSaid?.lastShutdown
    ? {
        guestInitiated: stopSaid.lastShutdown.guest,
        reason: stopSaid.lastShutdown.reason,
        time: stopSaid.lastShutdown.at,
        ...(stopSaid.stopRequested && { requested: true }),
        ...(stopSaid.lastShutdown.qemuSays && { qemuSays: stopSaid.lastShutdown.qemuSays }),
      }
    : previous?.lastShutdown;
  const lastReset = snapshot?.lastReset
    ? { request: snapshot.lastReset.request, time: snapshot.lastReset.at }
    : previous?.lastReset;
  return {
    ...(agent?.osinfo && { osinfo: agent.osinfo }),
    ...(agent?.connected && agent.addresses?.length && { ipAddresses: agent.addresses }),
    ...(snapshot && !noQemu && { cpus: snapshot.cpus, ram: formatBytes(snapshot.ram) }),
    ...(noQemu && { cpus: 0, ram: '0' }),
    ...(snapshot?.displayPasswordSerial !== undefined && {
      displayPasswordSerial: snapshot.displayPasswordSerial,
    }),
    ...(snapshot && { consoleClient: snapshot.consoleClient?.host ?? '' }),
    ...(snapshot?.loggedInUser && !noQemu && { loggedInUser: snapshot.loggedInUser }),
    ...(snapshot?.snapshotCopy && !noQemu && { snapshotCopy: snapshot.snapshotCopy }),
    ...(lastShutdown && { lastShutdown }),
    ...(lastReset && { lastReset }),
  };
}

export function deriveStatus(vm: VirtualMachine, observed: ObservedState): VirtualMachineStatus {
  const generation = vm.metadata.generation ?? 0;
  const previous = vm.status;
  const { pod, now } = observed;
  const conditions: Conditions = (facts) =>
    facts.map((c) => condition(previous?.conditions, c, generation, now));
  const container = runnerContainer(pod);
  const ownSnapshot = currentSnapshot(observed.snapshot, pod, previous);
  const specValid = specValidCondition(observed, ownSnapshot);

  const wantRunning = vm.spec.vm.state === 'Running' && !pod?.metadata?.deletionTimestamp;
  const nodeReady = !observed.node || observed.node.state === 'Ready';
  if (!ownSnapshot && wantRunning && nodeReady && runnerWentQuiet(previous, pod))
    return lastKnownStatus(vm, observed, specValid, conditions);

  const stoppedContainer = wantRunning && isStoppedContainer(container);
  // A stopped container's last snapshot describes a qemu that is gone: only its failure message counts.
  const snapshot = stoppedContainer ? undefined : ownSnapshot;
  const startFailure = nextStartFailure(vm, ownSnapshot, now);
  const phase = vmPhase(vm, observed, { stoppedContainer, ownSnapshot, snapshot }, startFailure);
  const awaiting = restartAwaitingChanges(observed.runnerVm ?? vm, pod, snapshot);
  const folded = snapshot ?? ownSnapshot;
  const reported = reportedFields(snapshot, previous, phase, lastWords(observed.snapshot, pod, previous));
  // A VM with an address of its own has only that one: what its guest (or a snapshot its
  // namespace's runner credential wrote) says never stands in for it (routes follow leases).
  const ipAddress = observed.ipAddress?.name ? observed.ipAddress.address : reported.ipAddresses?.[0];
  return {
    phase: phase.phase,
    observedGeneration: generation,
    conditions: conditions([
      specValid,
      ...guestConditions(phase, snapshot, pod !== undefined),
      awaitingRestartCondition(vm, awaiting),
      ...(observed.loadBalancer ? [loadBalancerCondition(observed.loadBalancer)] : []),
      ...(observed.node ? [nodeReachableCondition(observed.node)] : []),
      ...(observed.migration && pod ? [migratableCondition(observed.migration.migratable)] : []),
      ...(observed.disks?.statuses.length ? [observed.disks.condition] : []),
      ...(observed.ipAddress?.name ? [ipAddressCondition(observed.ipAddress)] : []),
    ]),
    ...(pod?.spec?.nodeName && phase.phase !== 'Stopped' && { node: pod.spec.nodeName }),
    ...(pod && phase.phase !== 'Stopped' && podClassFields(pod)),
    ...reported,
    ...(ipAddress && { ipAddress }),
    ...(observed.ipAddress?.name && { virtualMachineIPAddressName: observed.ipAddress.name }),
    ...(awaiting.length > 0 && { restartAwaitingChanges: awaiting }),
    ...(startFailure && { startFailure }),
    ...(container && { runnerRestarts: container.restartCount }),
    ...(folded && { runner: { runId: folded.runId, seq: folded.seq, podUid: folded.podUid } }),
    ...runnerPodStatus(vm, observed),
    ...((observed.migration?.state ?? previous?.migrationState) && {
      migrationState: observed.migration?.state ?? previous?.migrationState,
    }),
    ...(observed.disks?.statuses.length && { disks: observed.disks.statuses }),
  };
}

/** The class and core fraction the VM's runner pod was made with (its label, its recorded spec). */
function podClassFields(pod: V1Pod): Pick<VirtualMachineStatus, 'virtualMachineClassName' | 'coreFraction'> {
  const vmClass = pod.metadata?.labels?.[CLASS_LABEL];
  let coreFraction: unknown;
  try {
    coreFraction = JSON.parse(pod.metadata?.annotations?.[POD_SPEC_ANNOTATION] ?? '{}')['vm.coreFraction'];
  } catch {
    coreFraction = undefined;
  }
  return {
    ...(vmClass && { virtualMachineClassName: vmClass }),
    ...(typeof coreFraction === 'string' && { coreFraction }),
  };
}

function migratingPhase(state: MigrationState | undefined): PhaseFacts {
  const where = state?.targetNode ? ` to ${state.targetNode}` : '';
  return {
    phase: 'Migrating',
    reason: 'Migrating',
    message: `the VM moves live from ${state?.sourceNode ?? 'its node'}${where}`,
  };
}

function migratableCondition(migratable: Migratability): ConditionFacts {
  return {
    type: 'Migratable',
    status: migratable.migratable ? 'True' : 'False',
    reason: migratable.reason,
    message: migratable.message,
  };
}

/** status.runnerPod: the pod about to be made, the current one, or the last one while the VM is to run. */
function runnerPodStatus(
  vm: VirtualMachine,
  observed: ObservedState,
): Pick<VirtualMachineStatus, 'runnerPod'> {
  if (observed.creatingPod) return { runnerPod: { name: observed.creatingPod } };
  const pod = observed.pod?.metadata;
  const image = runnerImageOf(observed.pod);
  if (pod)
    return {
      runnerPod: {
        name: pod.name!,
        uid: pod.uid,
        ...(image && { image }),
        ...(observed.outdatedRunner && { outdated: true }),
      },
    };
  const last = vm.status?.runnerPod;
  return vm.spec.vm.state === 'Running' && last ? { runnerPod: last } : {};
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
): ObjectEvent[] {
  const events: ObjectEvent[] = [];
  // A migration's end is no start: the guest ran on.
  if (after.phase === 'Running' && before?.phase !== 'Running' && before?.phase !== 'Migrating') {
    events.push({ type: 'Normal', reason: 'Started', message: `the VM runs on ${after.node ?? 'its node'}` });
  }
  const shutdown = after.lastShutdown;
  if (shutdown && shutdown.time !== before?.lastShutdown?.time) {
    if (desiredState === 'Stopped' || shutdown.requested) {
      events.push({
        type: 'Normal',
        reason: 'StoppedByRequest',
        message: `the VM was stopped (${shutdown.reason})`,
      });
    } else if (shutdown.guestInitiated) {
      events.push({ type: 'Normal', reason: 'StoppedByGuest', message: 'the guest powered itself off' });
    } else {
      events.push({ type: 'Warning', reason: 'StoppedByHost', message: qemuStopped(shutdown) });
    }
  } else if (after.phase === 'Stopped' && before?.phase && before.phase !== 'Stopped') {
    events.push({ type: 'Normal', reason: 'Stopped', message: 'the VM is stopped' });
  }
  const migration = after.migrationState;
  const previousMigration = before?.migrationState;
  const started = (state: typeof migration) => state !== undefined && !state.result && !state.waiting;
  if (migration?.waiting && migration.id !== previousMigration?.id) {
    events.push({ type: 'Normal', reason: 'MigrationQueued', message: migration.waiting });
  }
  if (started(migration) && (migration!.id !== previousMigration?.id || !started(previousMigration))) {
    events.push({
      type: 'Normal',
      reason: 'Migrating',
      message: `moving live from ${migration!.sourceNode}`,
    });
  }
  if (migration?.result && (migration.id !== previousMigration?.id || !previousMigration.result)) {
    events.push(
      migration.result === 'Succeeded'
        ? {
            type: 'Normal',
            reason: 'Migrated',
            message: `${migration.message ?? 'moved live'} (the guest paused ${migration.downtimeMs ?? '?'} ms)`,
          }
        : {
            type: 'Warning',
            reason: 'MigrationFailed',
            message: `${migration.message}; the VM runs on where it was`,
          },
    );
  }
  if (after.phase === 'Failed' && before?.phase !== 'Failed') {
    const message = after.conditions?.find((c) => c.type === 'Running')?.message ?? 'the VM failed';
    events.push({ type: 'Warning', reason: 'Failed', message });
  }
  // kubelet's restartCount starts again at 0 in a new pod.
  const restarts = (after.runnerRestarts ?? 0) - (before?.runnerRestarts ?? 0);
  if (restarts > 0) {
    events.push({
      type: 'Warning',
      reason: 'RunnerRestarted',
      message: 'the runner container stopped and kubelet restarted it',
      count: restarts,
    });
  }
  return events;
}
