// What the agent reports about a pod, derived from what it knows about the pod's one container.
// Pure: kubelet's phase and condition rules for a single-container pod.
import type { V1ContainerState, V1Pod, V1PodCondition, V1PodStatus } from '@kubernetes/client-node';

export interface Termination {
  exitCode: number;
  /** The signal number, when a signal ended the process. */
  signal?: number;
  reason: string;
  message?: string;
  startedAt?: Date;
  finishedAt: Date;
  containerID?: string;
}

export type ContainerState =
  | { kind: 'waiting'; reason: string; message?: string }
  | { kind: 'running'; startedAt: Date; containerID: string }
  | { kind: 'terminated'; termination: Termination };

export interface ContainerRecord {
  name: string;
  image: string;
  state: ContainerState;
  /** The termination before the current state (kubelet's lastState). */
  lastTermination?: Termination;
  restartCount: number;
}

export type RestartPolicy = 'Always' | 'OnFailure' | 'Never';

export function restartPolicy(pod: V1Pod): RestartPolicy {
  const policy = pod.spec?.restartPolicy;
  return policy === 'OnFailure' || policy === 'Never' ? policy : 'Always';
}

export function willRestart(policy: RestartPolicy, exitCode: number): boolean {
  return policy === 'Always' || (policy === 'OnFailure' && exitCode !== 0);
}

/** How kubelet reports an exit: 128+n for a signal, reason Completed for 0, Error otherwise. */
export function terminationOf(
  exit: { code: number | null; signalNumber?: number },
  times: { startedAt?: Date; finishedAt: Date },
  containerID?: string,
): Termination {
  const exitCode = exit.code ?? 128 + (exit.signalNumber ?? 0);
  return {
    exitCode,
    ...(exit.signalNumber !== undefined && exit.code === null && { signal: exit.signalNumber }),
    reason: exitCode === 0 ? 'Completed' : 'Error',
    ...times,
    ...(containerID && { containerID }),
  };
}

function containerState(state: ContainerState): V1ContainerState {
  switch (state.kind) {
    case 'waiting':
      return { waiting: { reason: state.reason, ...(state.message && { message: state.message }) } };
    case 'running':
      return { running: { startedAt: state.startedAt } };
    case 'terminated':
      return { terminated: { ...state.termination } };
  }
}

export function podPhase(record: ContainerRecord): 'Pending' | 'Running' | 'Succeeded' | 'Failed' {
  switch (record.state.kind) {
    case 'running':
      return 'Running';
    case 'waiting':
      // Waiting after a termination means waiting to be restarted.
      return record.lastTermination ? 'Running' : 'Pending';
    case 'terminated':
      return record.state.termination.exitCode === 0 ? 'Succeeded' : 'Failed';
  }
}

export interface PodStatusInput {
  pod: V1Pod;
  container: ContainerRecord;
  hostIP: string;
  startTime: Date;
  /** Shown as the pod's status message (where the runner's output goes). */
  message: string;
  now: Date;
}

/** The pod's complete status; conditions keep lastTransitionTime while their status holds. */
export function podStatus(input: PodStatusInput): V1PodStatus {
  const { pod, container, now } = input;
  const phase = podPhase(container);
  const running = container.state.kind === 'running';
  const previous = pod.status?.conditions;
  const condition = (type: string, status: boolean, reason?: string, message?: string): V1PodCondition => {
    const value = status ? 'True' : 'False';
    const before = previous?.find((c) => c.type === type);
    const lastTransitionTime =
      before?.status === value && before.lastTransitionTime ? before.lastTransitionTime : now;
    return {
      type,
      status: value,
      lastTransitionTime,
      ...(reason && { reason }),
      ...(message && { message }),
    };
  };
  const terminal = phase === 'Succeeded' || phase === 'Failed';
  const notReady = terminal
    ? (['PodCompleted', undefined] as const)
    : (['ContainersNotReady', `containers with unready status: [${container.name}]`] as const);
  const readiness = (type: string) => condition(type, running, ...(running ? [] : notReady));
  const containerID =
    container.state.kind === 'running'
      ? container.state.containerID
      : container.state.kind === 'terminated'
        ? container.state.termination.containerID
        : undefined;
  return {
    phase,
    message: input.message,
    hostIP: input.hostIP,
    hostIPs: [{ ip: input.hostIP }],
    // Runner pods use the host network: the pod's address is the node's.
    podIP: input.hostIP,
    podIPs: [{ ip: input.hostIP }],
    startTime: input.startTime,
    qosClass: pod.status?.qosClass,
    conditions: [
      condition('PodScheduled', true),
      condition('Initialized', true, ...(terminal ? (['PodCompleted'] as const) : [])),
      readiness('ContainersReady'),
      readiness('Ready'),
    ],
    containerStatuses: [
      {
        name: container.name,
        image: container.image,
        imageID: '',
        ...(containerID && { containerID }),
        ready: running,
        started: running,
        restartCount: container.restartCount,
        state: containerState(container.state),
        lastState: container.lastTermination ? { terminated: { ...container.lastTermination } } : {},
      },
    ],
  };
}
