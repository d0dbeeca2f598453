// A running VM's disks copied at one instant by its own QEMU (issue 54's path for storage without
// CSI snapshots): what the manager asks of the runner (config vm.snapshotCopy) and what the runner
// answers (its snapshot's and the VM status' snapshotCopy). The copies go over NBD, TLS with the
// VM's pre-shared key, into claims that export pods of the VirtualMachineSnapshot serve.
import { z } from 'zod';
import { NbdExport } from './nbd-export.js';

/** A disk of the VM and the export its copy goes to. */
export const SnapshotCopyTarget = NbdExport;

export const SnapshotCopyConfig = z.object({
  /** The VirtualMachineSnapshot's uid: one copy per snapshot and QEMU. */
  id: z.string().min(1),
  /** Refuse the copy when the guest agent cannot freeze the guest (no crash-consistent copy). */
  requireFreeze: z.boolean().default(true),
  disks: z.array(SnapshotCopyTarget).min(1),
});

export const SnapshotCopyState = z.object({
  /** The snapshot's uid, as configured. */
  id: z.string(),
  /** copying: cut, the copies under way; completed: every disk copied; failed: see message. */
  state: z.enum(['copying', 'completed', 'failed']),
  /** FileSystem: frozen through the guest agent at the cut; Crash: as after a power cut. */
  consistency: z.enum(['FileSystem', 'Crash']).optional(),
  /** Why the copy is crash-consistent only. */
  reason: z.string().optional(),
  /** When the disks were cut. */
  cutAt: z.string().optional(),
  /** How long the guest's file systems were frozen, in milliseconds. */
  frozenMs: z.number().nonnegative().optional(),
  message: z.string().optional(),
});

export type SnapshotCopyTarget = z.output<typeof SnapshotCopyTarget>;
export type SnapshotCopyConfig = z.output<typeof SnapshotCopyConfig>;
export type SnapshotCopyState = z.output<typeof SnapshotCopyState>;
