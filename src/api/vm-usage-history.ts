// A VM's use over the last hour, as its runner records it in Redis for the GUI's VM page (which
// needs no Prometheus): one JSON array of samples, oldest first, SET whole under the VM's usage
// key (one of the few keys the runner's Redis user may write: a stream would let it add entries
// without bound). Counters are totals since QEMU started: a reader takes the difference of two
// samples, and a smaller total means a new QEMU (restart, migration).
import { z } from 'zod';
import { snapshotRedisKey } from './runner-snapshot.js';

export const USAGE_HISTORY_MS = 3600 * 1000;
export const USAGE_SAMPLE_SECONDS = 15;

export const usageHistoryKey = (vmKey: string) => `${snapshotRedisKey(vmKey)}#usage`;

/** One sample. */
export const UsageRecord = z.object({
  /** CPU seconds QEMU used so far. */
  cpu: z.coerce.number(),
  /** QEMU's resident memory. */
  resident: z.coerce.number(),
  /** The RAM the guest has (the balloon's size); absent without a balloon. */
  domain: z.coerce.number().optional(),
  /** MemAvailable as the guest reports it; absent until its balloon driver reported. */
  usable: z.coerce.number().optional(),
  /** Bytes read from and written to all drives so far. */
  diskRead: z.coerce.number(),
  diskWrite: z.coerce.number(),
  /** Bytes received and sent on all NICs so far (the guest agent's count); absent without one. */
  netReceive: z.coerce.number().optional(),
  netTransmit: z.coerce.number().optional(),
});
export type UsageRecord = z.infer<typeof UsageRecord>;

export const VmUsageSample = z.object({
  /** When it was taken, in milliseconds since the epoch. */
  t: z.number(),
  record: UsageRecord,
});
export type VmUsageSample = z.infer<typeof VmUsageSample>;

/**
 * A usage key's value as samples, oldest first, leaving out any it cannot read (the runner's
 * credential wrote it, so it may hold anything).
 */
export function parseUsageHistory(text: string | null | undefined): VmUsageSample[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text ?? '[]');
  } catch {
    return [];
  }
  if (!Array.isArray(parsed)) return [];
  return parsed.flatMap((sample) => {
    const read = VmUsageSample.safeParse(sample);
    return read.success ? [read.data] : [];
  });
}

/** `history` with `sample` added and what is older than an hour before it left out. Pure. */
export function withSample(history: VmUsageSample[], sample: VmUsageSample): VmUsageSample[] {
  const oldest = sample.t - USAGE_HISTORY_MS;
  return [...history.filter((kept) => kept.t >= oldest && kept.t < sample.t), sample];
}
