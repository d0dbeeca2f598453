import { describe, expect, it } from 'vitest';
import { parseUsageFields, usageFields, type UsageRecord } from '../../../src/api/vm-usage-history.js';
import { usagePoints } from '../../../src/web/vm-details.js';

const record = (cpu: number, diskWrite: number, extra: Partial<UsageRecord> = {}): UsageRecord => ({
  cpu,
  resident: 300,
  diskRead: 0,
  diskWrite,
  ...extra,
});

describe("the VM page's use over the last hour", () => {
  it('keeps a sample in a stream entry and reads it back; a garbled entry is left out', () => {
    const sample = record(12.5, 4096, { domain: 256, usable: 100, netReceive: 10, netTransmit: 20 });
    expect(parseUsageFields(usageFields(sample))).toEqual(sample);
    expect(parseUsageFields(usageFields(record(1, 2)))).toEqual(record(1, 2));
    expect(parseUsageFields(['cpu', 'lots'])).toBeUndefined();
  });

  it('gives rates between samples, none across a new QEMU (its totals start again) or a gap', () => {
    const points = usagePoints(
      [
        { t: 0, record: record(10, 0) },
        { t: 15_000, record: record(13, 15 * 1024 * 1024, { domain: 256, usable: 100 }) },
        { t: 30_000, record: record(1, 0) }, // restarted: totals from zero
        { t: 45_000, record: record(2.5, 0) },
        { t: 600_000, record: record(100, 0) }, // off in between
      ],
      15,
    );
    expect(points.map((p) => p.cpuCores)).toEqual([undefined, 0.2, undefined, 0.1, undefined]);
    expect(points[1]).toMatchObject({
      diskWriteBytesPerSecond: 1024 * 1024,
      guestUsedBytes: 156,
      residentBytes: 300,
    });
    expect(points[1]!.netReceiveBytesPerSecond).toBeUndefined(); // no guest agent counts
  });
});
