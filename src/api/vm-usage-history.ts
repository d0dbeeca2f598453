// A VM's use over the last hour, as its runner records it in Redis for the GUI's VM page (which
// needs no Prometheus): one stream entry per sample, under the VM's snapshot key (the runner's
// Redis user may write there and nowhere else). Counters are totals since QEMU started: a reader
// takes the difference of two samples, and a smaller total means a new QEMU (restart, migration).
import { z } from 'zod';
import { snapshotRedisKey } from './runner-snapshot.js';

export const USAGE_HISTORY_MS = 3600 * 1000;
export const USAGE_SAMPLE_SECONDS = 15;

export const usageHistoryKey = (vmKey: string) => `${snapshotRedisKey(vmKey)}#usage`;

/** One sample; stream fields carry the same names. */
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

/** A stream entry's fields (name, value, name, value, …). */
export function usageFields(record: UsageRecord): string[] {
  return Object.entries(record).flatMap(([name, value]) =>
    value === undefined ? [] : [name, String(value)],
  );
}

export function parseUsageFields(fields: string[]): UsageRecord | undefined {
  const object = Object.fromEntries(
    fields.flatMap((value, i) => (i % 2 === 0 ? [[value, fields[i + 1]]] : [])),
  );
  return UsageRecord.safeParse(object).data;
}

export interface VmUsageSample {
  /** Milliseconds since the epoch (the entry's ID). */
  t: number;
  record: UsageRecord;
}

/** A stream's entries (XRANGE/XREVRANGE replies) as samples, leaving out any it cannot read. */
export function usageSamples(entries: Array<[id: string, fields: string[]]>): VmUsageSample[] {
  return entries.flatMap(([id, fields]) => {
    const record = parseUsageFields(fields);
    return record ? [{ t: Number(id.split('-')[0]), record }] : [];
  });
}
