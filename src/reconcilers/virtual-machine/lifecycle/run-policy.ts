// What a VM's run policy means for the runner and for the VM's desired state (pure). The README's
// run-policy table is the user-facing version of these rules.
import type { V1Pod } from '@kubernetes/client-node';
import type { RunnerSettings } from '../../../api/runner-config.js';
import type { RunnerSnapshot } from '../../../api/runner-snapshot.js';
import type { VirtualMachine, VirtualMachineStatus } from '../../../api/virtual-machine.js';
import { OPERATION_ANNOTATION } from '../naming.js';
import { runnerContainer } from '../runner-pod/facts.js';

type AfterQemuEnds = Pick<RunnerSettings, 'whenGuestPowersOff' | 'whenQemuFails' | 'whenStartFails'>;

/**
 * What the runner does when qemu ends without being asked to: exit, so that kubelet starts the
 * VM again, or wait until the operator has set the VM to Stopped (the VM stays off). A start
 * failure always waits: the operator's start back-off (start-backoff.ts) decides when to retry.
 */
export function afterQemuEnds(vm: VirtualMachine): AfterQemuEnds {
  return { ...afterQemuEndsByPolicy(vm), whenStartFails: 'waitForRetry' };
}

function afterQemuEndsByPolicy(vm: VirtualMachine): Omit<AfterQemuEnds, 'whenStartFails'> {
  switch (vm.spec.runPolicy) {
    case 'AlwaysOnUnlessStoppedManually':
      return { whenGuestPowersOff: 'waitForStop', whenQemuFails: 'restart' };
    case 'Manual':
      return { whenGuestPowersOff: 'waitForStop', whenQemuFails: 'waitForStop' };
    case 'AlwaysOn':
    case 'AlwaysOff':
      return { whenGuestPowersOff: 'restart', whenQemuFails: 'restart' };
    default: // VM-Operator's behaviour
      return {
        whenGuestPowersOff: vm.spec.guestShutdownStops ? 'waitForStop' : 'restart',
        whenQemuFails: 'restart',
      };
  }
}

export interface PolicyStop {
  reason: string;
  message: string;
}

export interface PolicyFacts {
  pod?: V1Pod;
  /** The runner's snapshot, if it comes from the current pod's runner. */
  snapshot?: RunnerSnapshot;
  /** The status just derived from these facts. */
  status: VirtualMachineStatus;
}

/**
 * Whether the VM's desired state becomes Stopped now, because its policy keeps it off after what
 * happened: the guest powered itself off, qemu failed, or (Manual) the runner pod went away.
 */
export function policyStop(vm: VirtualMachine, facts: PolicyFacts): PolicyStop | undefined {
  if (vm.spec.vm.state !== 'Running') return undefined;
  const after = afterQemuEnds(vm);
  const { snapshot } = facts;
  if (
    after.whenGuestPowersOff === 'waitForStop' &&
    snapshot?.lastShutdown?.guest === true &&
    !snapshot.stopRequested &&
    (snapshot.phase === 'stopping' || snapshot.phase === 'stopped') &&
    // A pod on its way out said so before: the VM was stopped for it, and a Start since (a manager
    // whose cache still has the pod) must not be undone by the old run's words.
    !facts.pod?.metadata?.deletionTimestamp
  ) {
    return { reason: 'StoppedByGuest', message: 'the guest powered itself off; the VM stays off' };
  }
  if (after.whenQemuFails !== 'waitForStop') return undefined;
  if (facts.status.phase === 'Failed') {
    const why = facts.status.conditions?.find((c) => c.type === 'Running')?.message ?? 'the VM failed';
    return { reason: 'StoppedAfterFailure', message: `${why}; runPolicy Manual keeps the VM off` };
  }
  const lost = runnerLost(vm, facts.pod);
  return lost ? { reason: 'RunnerLost', message: `${lost}; runPolicy Manual keeps the VM off` } : undefined;
}

/**
 * The runner that last reported is gone (its pod deleted, evicted or lost with its node), or its
 * container was restarted (killed), and nobody asked for it: not an operation of vmop's, not a
 * spec change since that report.
 */
function runnerLost(vm: VirtualMachine, pod: V1Pod | undefined): string | undefined {
  const reported = vm.status?.runner?.podUid;
  if (!reported || vm.status?.observedGeneration !== vm.metadata.generation) return undefined;
  if (vm.metadata.annotations?.[OPERATION_ANNOTATION]) return undefined;
  if (!pod || pod.metadata?.uid !== reported) return 'the runner pod went away';
  if (pod.metadata?.deletionTimestamp) return 'the runner pod is being deleted';
  const restarts = runnerContainer(pod)?.restartCount ?? 0;
  if (restarts > (vm.status?.runnerRestarts ?? 0)) return 'the runner container was restarted';
  return undefined;
}
