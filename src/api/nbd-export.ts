// Where a runner's QEMU reaches a claim a helper pod serves over NBD (TLS with the VM's key): a
// disk attached at runtime, or the copy a snapshot of the running VM is written into.
import { z } from 'zod';

export const NbdExport = z.object({
  /** The VM's volume the export is for (a disk attached at runtime: the guest sees it as its serial). */
  volume: z.string().regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, 'a volume name (lower case, digits, -)'),
  host: z.string().min(1),
  port: z.number().int().min(1).max(65535),
  /** The NBD export's name. */
  export: z.string().min(1).default('disk'),
});
