// The VirtualMachineRestore custom resource (short name vmrestore): writes a VirtualMachineSnapshot's
// copies back onto its VM's disks and runner data, as KubeVirt's VirtualMachineRestore. A kind of its
// own rather than a VirtualMachineOperation type: it copies data for minutes with a status per
// volume, where an operation signals the VM once, and RBAC can grant it apart from start and stop.
import { z } from 'zod';
import { Condition, GROUP, ObjectMeta, VERSION } from './virtual-machine.js';

export const RESTORE_KIND = 'VirtualMachineRestore';
export const RESTORE_PLURAL = 'virtualmachinerestores';
export const RESTORE_SINGULAR = 'virtualmachinerestore';
export const RESTORE_SHORT_NAME = 'vmrestore';

export const RestoreSpec = z
  .object({
    virtualMachineName: z.string().min(1).max(253).describe('The VM (in the same namespace) to restore.'),
    virtualMachineSnapshotName: z
      .string()
      .min(1)
      .max(253)
      .describe('The snapshot (of that VM, in the same namespace) whose copies are written back.'),
    stopVirtualMachine: z
      .boolean()
      .default(false)
      .describe(
        'Stop the VM if it runs (and start it again once restored); without it a restore waits until the VM is stopped.',
      ),
  })
  .meta({
    'x-kubernetes-validations': [{ rule: 'self == oldSelf', message: 'the spec of a restore is immutable' }],
  });

export const RestorePhase = z.enum(['Pending', 'InProgress', 'Completed', 'Failed']);

export const RestoreVolume = z.object({
  /** The VM's volume: `runner-data` or a disk's `<name>-disk`. */
  name: z.string(),
  /** The VM's claim written to. */
  claimName: z.string(),
  /** The snapshot's claim read from. */
  copyClaimName: z.string(),
  volumeMode: z.enum(['Block', 'Filesystem']),
  phase: z.enum(['Copying', 'Restored', 'Failed']).optional(),
  message: z.string().optional(),
});

export const RestoreStatus = z.object({
  phase: RestorePhase.optional(),
  volumes: z.array(RestoreVolume).optional(),
  /** The restore stopped the VM (stopVirtualMachine), and starts it again once done. */
  stoppedVirtualMachine: z.boolean().optional(),
  startedAt: z.string().optional(),
  completedAt: z.string().optional(),
  message: z.string().optional(),
  observedGeneration: z.number().int().optional(),
  conditions: z.array(Condition).optional(),
});

export const VirtualMachineRestore = z.object({
  apiVersion: z.literal(`${GROUP}/${VERSION}`),
  kind: z.literal(RESTORE_KIND),
  metadata: ObjectMeta.extend({ creationTimestamp: z.union([z.string(), z.date()]).optional() }),
  spec: RestoreSpec,
  status: RestoreStatus.optional(),
});

export type VirtualMachineRestore = z.infer<typeof VirtualMachineRestore>;
export type RestoreStatus = z.infer<typeof RestoreStatus>;
export type RestoreVolume = z.infer<typeof RestoreVolume>;

/** The work-queue key of a restore. */
export const restoreKey = (namespace: string, name: string) => `vmrestore:${namespace}/${name}`;
export function parseRestoreKey(key: string): { namespace: string; name: string } {
  const match = /^vmrestore:([^/]+)\/(.+)$/.exec(key);
  if (!match) throw new Error(`not a VirtualMachineRestore key: ${key}`);
  return { namespace: match[1]!, name: match[2]! };
}

export const isRestoreDone = (restore: { status?: { phase?: string } }) =>
  restore.status?.phase === 'Completed' || restore.status?.phase === 'Failed';
