import { describe, expect, it } from 'vitest';
import {
  parseUsageHistory,
  USAGE_HISTORY_MS,
  withSample,
  type UsageRecord,
} from '../../../src/api/vm-usage-history.js';
import { snapshotRows, usagePoints } from '../../../src/web/vm-details.js';
import { VirtualMachineSnapshot } from '../../../src/api/virtual-machine-snapshot.js';

const record = (cpu: number, diskWrite: number, extra: Partial<UsageRecord> = {}): UsageRecord => ({
  cpu,
  resident: 300,
  diskRead: 0,
  diskWrite,
  ...extra,
});

describe("the VM page's use over the last hour", () => {
  it('keeps the last hour of samples in one value and reads it back; what is garbled is left out', () => {
    const full = {
      t: 2_000,
      record: record(12.5, 4096, { domain: 256, usable: 100, netReceive: 10, netTransmit: 20 }),
    };
    let history = withSample([], { t: 1_000, record: record(1, 2) });
    history = withSample(history, full);
    expect(parseUsageHistory(JSON.stringify(history))).toEqual([{ t: 1_000, record: record(1, 2) }, full]);
    // An hour on, the first sample is gone; one from the future (a clock that went back) too.
    const later = { t: 1_001 + USAGE_HISTORY_MS, record: record(20, 0) };
    expect(withSample(history, later)).toEqual([full, later]);
    expect(withSample([later], full)).toEqual([full]);
    expect(parseUsageHistory(JSON.stringify([{ t: 1, record: { cpu: 'lots' } }, full, 7]))).toEqual([full]);
    expect(parseUsageHistory('{"not": "a list"}')).toEqual([]);
    expect(parseUsageHistory('garbled')).toEqual([]);
    expect(parseUsageHistory(null)).toEqual([]);
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

describe("the VM page's snapshots", () => {
  it('lists each with its phase, consistency, size and time, what is not known left out', () => {
    const snapshot = (name: string, status?: object) =>
      VirtualMachineSnapshot.parse({
        apiVersion: 'vmoperator.jdrupes.org/v1',
        kind: 'VirtualMachineSnapshot',
        metadata: { name, namespace: 'ns', creationTimestamp: '2026-11-29T10:00:00Z' },
        spec: { virtualMachineName: 'web' },
        ...(status && { status }),
      });
    expect(
      snapshotRows([
        snapshot('new'),
        snapshot('old', {
          phase: 'Ready',
          consistency: 'Stopped',
          size: '17Mi',
          cutAt: '2026-11-29T10:00:05Z',
        }),
      ]),
    ).toEqual([
      { name: 'new', phase: 'Pending', createdAt: '2026-11-29T10:00:00.000Z' },
      {
        name: 'old',
        phase: 'Ready',
        consistency: 'Stopped',
        size: '17Mi',
        cutAt: '2026-11-29T10:00:05Z',
        createdAt: '2026-11-29T10:00:00.000Z',
      },
    ]);
  });
});
