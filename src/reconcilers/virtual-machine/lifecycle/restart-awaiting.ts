// Which spec changes the running VM has not taken (pure): what its runner pod was made from
// differs from the spec, or its runner reports config changes that qemu takes only at a start.
import type { V1Pod } from '@kubernetes/client-node';
import { isDeepStrictEqual } from 'node:util';
import { formatBytes } from '../../../api/runner-config.js';
import type { RunnerSnapshot } from '../../../api/runner-snapshot.js';
import type { RestartAwaitingChange, VirtualMachine } from '../../../api/virtual-machine.js';
import { POD_SPEC_ANNOTATION } from '../naming.js';
import { specPathOfRunnerField } from '../runner-config/config.js';

/**
 * The VM's fields that shape its runner pod, as the user wrote them or its class gave them
 * (class/vm-class.ts withClass). Derived values (the
 * default image, requests from currentCpus/currentRam) are left out on purpose: a manager upgrade
 * or a live change must never make a VM wait for a restart.
 */
export function podSpecOfVm(vm: VirtualMachine): Record<string, unknown> {
  const { image, resources, nodeName, nodeSelector, affinity, tolerations } = vm.spec;
  // The provisioning Secrets are volumes of the pod (keys are paths below spec).
  const secrets = {
    'cloudInit.secretRef': vm.spec.cloudInit?.secretRef,
    'sysprep.secretRef': vm.spec.sysprep?.secretRef,
  };
  // The core fraction (the VM's or its class's) shapes the pod's CPU request.
  const coreFraction = { 'vm.coreFraction': vm.spec.vm.coreFraction };
  return JSON.parse(
    JSON.stringify({
      image,
      resources,
      nodeName,
      nodeSelector,
      affinity,
      tolerations,
      ...secrets,
      ...coreFraction,
    }),
  );
}

function change(path: string, current: unknown, desired: unknown): RestartAwaitingChange {
  const operation = current === undefined ? 'add' : desired === undefined ? 'remove' : 'replace';
  return {
    operation,
    path,
    ...(current !== undefined && { currentValue: current }),
    ...(desired !== undefined && { desiredValue: desired }),
  };
}

function podChanges(vm: VirtualMachine, pod: V1Pod): RestartAwaitingChange[] {
  const recorded = pod.metadata?.annotations?.[POD_SPEC_ANNOTATION];
  if (!recorded) return []; // a pod made before vmop recorded this: nothing to compare with
  let started: Record<string, unknown>;
  try {
    started = JSON.parse(recorded);
  } catch {
    return [];
  }
  const desired = podSpecOfVm(vm);
  const keys = [...new Set([...Object.keys(started), ...Object.keys(desired)])].sort();
  return keys
    .filter((key) => !isDeepStrictEqual(started[key], desired[key]))
    .map((key) => change(`spec.${key}`, started[key], desired[key]));
}

/** Sizes are bytes in the runner's config; the spec says them as quantities. */
const readable = (field: string, value: unknown) =>
  /^vm\.maximumRam$/.test(field) && typeof value === 'number' ? formatBytes(value) : value;

function runnerChanges(snapshot: RunnerSnapshot | undefined): RestartAwaitingChange[] {
  return (snapshot?.restartChanges ?? []).map(({ field, current, desired }) =>
    change(specPathOfRunnerField(field), readable(field, current), readable(field, desired)),
  );
}

/**
 * The changes waiting for a restart of the VM's current runner pod. `snapshot` must be the
 * current pod's runner's (see currentSnapshot); without a pod that runs there is nothing waiting.
 */
export function restartAwaitingChanges(
  vm: VirtualMachine,
  pod: V1Pod | undefined,
  snapshot: RunnerSnapshot | undefined,
): RestartAwaitingChange[] {
  if (!pod || pod.metadata?.deletionTimestamp || vm.spec.vm.state !== 'Running') return [];
  const changes = [...podChanges(vm, pod), ...runnerChanges(snapshot)];
  const seen = new Set<string>();
  return changes.filter((c) => !seen.has(c.path) && seen.add(c.path));
}
