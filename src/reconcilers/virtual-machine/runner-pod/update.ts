// Upgrades move VMs live (KubeVirt's workloadUpdateStrategy), pure. A running VM that names no
// image of its own and whose runner pod runs another image than the manager's default runner
// image is outdated. vmop moves it live onto a pod of the new image with a Migrate operation of
// its own (the migration limits bound how many move at once), or, when the chart says so,
// restarts one that cannot move. One operation per runner pod: when it fails, the VM is left as it
// is, and its status (status.runnerPod.outdated) says it still runs the older runner.
import type { V1Pod } from '@kubernetes/client-node';
import { z } from 'zod';
import { OPERATION_KIND, type VirtualMachineOperation } from '../../../api/virtual-machine-operation.js';
import { API_VERSION, type VirtualMachine } from '../../../api/virtual-machine.js';
import { OPERATION_VM_LABEL } from '../../virtual-machine-operation/operations.js';
import { OPERATION_ANNOTATION, ownerReference } from '../naming.js';
import { runnerImageOf } from './facts.js';
import type { Migratability } from '../migration/migratable.js';

/** What vmop does to a VM left on an older runner image: move it live, also restart it when it cannot, or leave it. */
export const RunnerUpdateMethod = z.enum(['LiveMigrate', 'LiveMigrateOrRestart', 'None']);
export type RunnerUpdateMethod = z.infer<typeof RunnerUpdateMethod>;

/** Whether the pod runs an older runner image than the manager's default, for a VM that takes the default. */
export function runsOutdatedRunner(
  vm: VirtualMachine,
  pod: V1Pod | undefined,
  defaultImage: string,
): boolean {
  const image = runnerImageOf(pod);
  return !vm.spec.image && image !== undefined && image !== defaultImage;
}

export interface RunnerUpdateFacts {
  vm: VirtualMachine;
  pod?: V1Pod;
  outdated: boolean;
  migratable: Migratability;
  method: RunnerUpdateMethod;
  /** A migration is under way. */
  migrating: boolean;
}

/** The operation that brings the VM onto the default runner image, when one is due now. */
export function runnerUpdate(facts: RunnerUpdateFacts): VirtualMachineOperation | undefined {
  const { vm, pod } = facts;
  if (!facts.outdated || facts.method === 'None' || !pod?.metadata?.uid) return undefined;
  const runs = vm.spec.vm.state === 'Running' && !pod.metadata.deletionTimestamp;
  const busy = facts.migrating || vm.metadata.annotations?.[OPERATION_ANNOTATION] !== undefined;
  if (!runs || busy) return undefined;
  if (facts.migratable.migratable) return updateOperation(vm, pod, 'Migrate');
  return facts.method === 'LiveMigrateOrRestart' ? updateOperation(vm, pod, 'Restart') : undefined;
}

function updateOperation(
  vm: VirtualMachine,
  pod: V1Pod,
  type: 'Migrate' | 'Restart',
): VirtualMachineOperation {
  return {
    apiVersion: API_VERSION,
    kind: OPERATION_KIND,
    metadata: {
      name: `${vm.metadata.name}-runner-update-${pod.metadata!.uid!.replaceAll('-', '').slice(0, 8)}`,
      namespace: vm.metadata.namespace,
      labels: { [OPERATION_VM_LABEL]: vm.metadata.name },
      ownerReferences: [{ ...ownerReference(vm), controller: false }],
    },
    spec: { virtualMachineName: vm.metadata.name, type },
  };
}
