// The VirtualMachineClone custom resource (short name vmclone): a new VM made from a
// VirtualMachineSnapshot, as KubeVirt's VirtualMachineClone: the snapshot's spec and labels, its
// disks filled from the snapshot's copies, and an identity of its own (no MAC, machine UUID, address
// or pool of the original; fresh runner data, so a new TPM and UEFI variables).
import { z } from 'zod';
import { Condition, GROUP, MAX_VM_NAME_LENGTH, ObjectMeta, VERSION } from './virtual-machine.js';

export const CLONE_KIND = 'VirtualMachineClone';
export const CLONE_PLURAL = 'virtualmachineclones';
export const CLONE_SINGULAR = 'virtualmachineclone';
export const CLONE_SHORT_NAME = 'vmclone';

export const CloneSpec = z
  .object({
    virtualMachineSnapshotName: z
      .string()
      .min(1)
      .max(253)
      .describe('The snapshot (in the same namespace) the new VM is made from.'),
    newVirtualMachineName: z
      .string()
      .min(1)
      .max(MAX_VM_NAME_LENGTH)
      .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/)
      .describe('The name of the new VM (in the same namespace); there must be no VM of that name.'),
    state: z
      .enum(['Running', 'Stopped'])
      .optional()
      .describe("The new VM's spec.vm.state; the snapshot's when absent."),
  })
  .meta({
    'x-kubernetes-validations': [{ rule: 'self == oldSelf', message: 'the spec of a clone is immutable' }],
  });

export const ClonePhase = z.enum(['Pending', 'Completed', 'Failed']);

export const CloneStatus = z.object({
  phase: ClonePhase.optional(),
  message: z.string().optional(),
  completedAt: z.string().optional(),
  observedGeneration: z.number().int().optional(),
  conditions: z.array(Condition).optional(),
});

export const VirtualMachineClone = z.object({
  apiVersion: z.literal(`${GROUP}/${VERSION}`),
  kind: z.literal(CLONE_KIND),
  metadata: ObjectMeta.extend({ creationTimestamp: z.union([z.string(), z.date()]).optional() }),
  spec: CloneSpec,
  status: CloneStatus.optional(),
});

export type VirtualMachineClone = z.infer<typeof VirtualMachineClone>;
export type CloneStatus = z.infer<typeof CloneStatus>;

/** The work-queue key of a clone. */
export const cloneKey = (namespace: string, name: string) => `vmclone:${namespace}/${name}`;
export function parseCloneKey(key: string): { namespace: string; name: string } {
  const match = /^vmclone:([^/]+)\/(.+)$/.exec(key);
  if (!match) throw new Error(`not a VirtualMachineClone key: ${key}`);
  return { namespace: match[1]!, name: match[2]! };
}

export const isCloneDone = (clone: { status?: { phase?: string } }) =>
  clone.status?.phase === 'Completed' || clone.status?.phase === 'Failed';
