// What the GUI's page of one VM shows: its conditions, disks, migration and Events, and its use
// over the last hour from the samples its runner keeps (api/vm-usage-history.ts). Pure.
import type { CoreV1Event } from '@kubernetes/client-node';
import type { VirtualMachine } from '../api/virtual-machine.js';
import type { VirtualMachineSnapshot } from '../api/virtual-machine-snapshot.js';
import type { VmUsageSample } from '../api/vm-usage-history.js';

/** At most this many Events, the latest. */
const EVENTS_SHOWN = 30;

export interface UsagePoint {
  /** Milliseconds since the epoch. */
  t: number;
  /** Cores QEMU used since the sample before. */
  cpuCores?: number;
  /** What the VM takes from its node (QEMU's resident memory). */
  residentBytes: number;
  /** What the guest uses of its RAM (its RAM less what it could give its programs), when it says. */
  guestUsedBytes?: number;
  diskReadBytesPerSecond?: number;
  diskWriteBytesPerSecond?: number;
  netReceiveBytesPerSecond?: number;
  netTransmitBytesPerSecond?: number;
}

/**
 * Rates between consecutive samples. A total that went down belongs to a new QEMU (a restart, the
 * target of a migration): no rate across it. Nor across a gap (the VM was off).
 */
export function usagePoints(samples: VmUsageSample[], sampleSeconds: number) {
  const points: UsagePoint[] = [];
  samples.forEach(({ t, record }, i) => {
    const before = samples[i - 1];
    const seconds = before && (t - before.t) / 1000;
    const comparable =
      before && seconds! > 0 && seconds! <= 3 * sampleSeconds && record.cpu >= before.record.cpu;
    const rate = (now: number | undefined, then: number | undefined) =>
      comparable && now !== undefined && then !== undefined && now >= then
        ? (now - then) / seconds!
        : undefined;
    points.push({
      t,
      cpuCores: rate(record.cpu, before?.record.cpu),
      residentBytes: record.resident,
      guestUsedBytes:
        record.domain !== undefined && record.usable !== undefined
          ? record.domain - record.usable
          : undefined,
      diskReadBytesPerSecond: rate(record.diskRead, before?.record.diskRead),
      diskWriteBytesPerSecond: rate(record.diskWrite, before?.record.diskWrite),
      netReceiveBytesPerSecond: rate(record.netReceive, before?.record.netReceive),
      netTransmitBytesPerSecond: rate(record.netTransmit, before?.record.netTransmit),
    });
  });
  return points;
}

export function vmDetails(vm: VirtualMachine, events: CoreV1Event[]) {
  const { status } = vm;
  const when = (event: CoreV1Event) => {
    const stamp = event.lastTimestamp ?? event.eventTime ?? event.metadata.creationTimestamp;
    return stamp ? new Date(stamp).toISOString() : '';
  };
  return {
    conditions: (status?.conditions ?? []).map(({ type, status, reason, message, lastTransitionTime }) => ({
      type,
      status,
      reason,
      message,
      lastTransitionTime,
    })),
    disks: status?.disks ?? [],
    ...(status?.migrationState && { migration: status.migrationState }),
    events: events
      .map((event) => ({
        type: event.type,
        reason: event.reason,
        message: event.message,
        count: event.count ?? 1,
        at: when(event),
      }))
      .sort((a, b) => b.at.localeCompare(a.at))
      .slice(0, EVENTS_SHOWN),
  };
}

/** What the page lists of a VM's snapshots (newest first). */
export function snapshotRows(snapshots: VirtualMachineSnapshot[]) {
  return snapshots.map(({ metadata, status }) => ({
    name: metadata.name,
    phase: status?.phase ?? 'Pending',
    ...(status?.consistency && { consistency: status.consistency }),
    ...(status?.size && { size: status.size }),
    ...(status?.cutAt && { cutAt: status.cutAt }),
    ...(status?.message && { message: status.message }),
    ...(metadata.creationTimestamp && { createdAt: new Date(metadata.creationTimestamp).toISOString() }),
  }));
}
