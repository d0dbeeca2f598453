// Disks that grow while the VM runs (pure): a disk's size in the spec raised → its claim is
// expanded (where its StorageClass allows it) → once the claim holds more, the runner's config
// says so and the runner tells QEMU (block_resize), so the running guest sees the new size.
// A disk never shrinks; what cannot be done is refused with a message and changes nothing.
import type { V1PersistentVolumeClaim, V1StorageClass } from '@kubernetes/client-node';
import { parseMemorySize } from '../../../api/runner-config.js';
import type { Condition, DiskStatus } from '../../../api/virtual-machine.js';
import type { RunnerClaim } from './claims.js';

export interface ClaimExpansion {
  claim: string;
  storage: string;
}

export interface DiskSizes {
  /** Claims to expand to the spec's size. */
  expand: ClaimExpansion[];
  statuses: DiskStatus[];
  /** Condition Resized: every disk has the size the spec asks for, or why not. */
  condition: Pick<Condition, 'type' | 'status' | 'reason' | 'message'>;
  /** The size each disk's volume holds now, for the runner's config (by volume). */
  capacities: Record<string, string>;
}

const bytesOf = (quantity: unknown) =>
  quantity === undefined ? undefined : parseMemorySize(String(quantity as string | number));

/**
 * What to do about the sizes of the VM's disks: `claims` as runnerClaims() gives them, `existing`
 * the VM's claims (from the cache), `storageClass` looks one up (the cluster's default when the
 * claim names none is not known here: such a claim is treated as not expandable).
 */
export function planDiskSizes(
  claims: RunnerClaim[],
  existing: V1PersistentVolumeClaim[],
  storageClass: (name: string) => V1StorageClass | undefined,
): DiskSizes {
  const byName = new Map(existing.map((claim) => [claim.metadata?.name, claim]));
  const plan: DiskSizes = {
    expand: [],
    statuses: [],
    capacities: {},
    condition: { type: 'Resized', status: 'True', reason: 'Sized', message: 'every disk has its size' },
  };
  const refusals: Array<{ reason: string; message: string }> = [];
  const growing: string[] = [];
  for (const disk of claims.filter((claim) => claim.block)) {
    const claim = byName.get(disk.claimName);
    if (!claim || !claim.spec) {
      plan.statuses.push({ name: disk.volume, claim: disk.claimName, phase: 'Pending' });
      continue;
    }
    const wanted = disk.desired.spec?.resources?.requests?.storage;
    const asked = claim.spec.resources?.requests?.storage;
    const capacity = claim.status?.capacity?.storage;
    const [wantedBytes, askedBytes, capacityBytes] = [bytesOf(wanted), bytesOf(asked), bytesOf(capacity)];
    if (capacity !== undefined) plan.capacities[disk.volume] = String(capacity);
    let target = askedBytes;
    if (wantedBytes !== undefined && askedBytes !== undefined && wantedBytes !== askedBytes) {
      const className = claim.spec.storageClassName;
      const expandable = className ? storageClass(className)?.allowVolumeExpansion === true : false;
      if (wantedBytes < askedBytes) {
        refusals.push({
          reason: 'ShrinkRefused',
          message: `disk ${disk.volume}: ${String(wanted)} is less than the ${String(asked)} of its claim ${disk.claimName}; a disk cannot shrink`,
        });
      } else if (!expandable) {
        refusals.push({
          reason: 'ExpansionNotAllowed',
          message: `disk ${disk.volume}: its claim ${disk.claimName} cannot grow to ${String(wanted)}: ${
            className
              ? `StorageClass ${className} does not allow volume expansion`
              : 'it names no StorageClass that allows volume expansion'
          }`,
        });
      } else if (!claim.metadata?.deletionTimestamp) {
        plan.expand.push({ claim: disk.claimName, storage: String(wanted) });
        target = wantedBytes;
      }
    }
    const resizing = target !== undefined && capacityBytes !== undefined && capacityBytes < target;
    if (resizing)
      growing.push(
        `${disk.volume} (${String(capacity)} → ${String(target === wantedBytes ? wanted : asked)})`,
      );
    plan.statuses.push({
      name: disk.volume,
      claim: disk.claimName,
      ...(capacity !== undefined && { capacity: String(capacity) }),
      phase: capacity === undefined ? 'Pending' : resizing ? 'Resizing' : 'Ready',
    });
  }
  if (refusals.length > 0) {
    plan.condition = {
      type: 'Resized',
      status: 'False',
      reason: refusals[0]!.reason,
      message: refusals.map((refusal) => refusal.message).join('; '),
    };
  } else if (growing.length > 0) {
    plan.condition = {
      type: 'Resized',
      status: 'False',
      reason: 'Resizing',
      message: `growing: ${growing.join(', ')}`,
    };
  }
  return plan;
}
