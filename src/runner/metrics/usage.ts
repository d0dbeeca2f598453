// What a running VM uses, read from what QEMU, the kernel and the guest agent tell: pure parsers
// of their replies, so the sampler (sampler.ts) only does the asking.
import { z } from 'zod';
import type { UsageRecord } from '../../api/vm-usage-history.js';

/** Linux reports process times in USER_HZ ticks, 100 per second on every architecture's ABI. */
const TICKS_PER_SECOND = 100;
/** QEMU's "not reported by the guest" in the balloon's statistics. */
const UNKNOWN_STAT = 2 ** 64 - 1;

export interface DriveUsage {
  drive: string;
  readBytes: number;
  writeBytes: number;
  readOperations: number;
  writeOperations: number;
  flushOperations: number;
  readSeconds: number;
  writeSeconds: number;
  flushSeconds: number;
}

export interface InterfaceUsage {
  interface: string;
  receiveBytes: number;
  transmitBytes: number;
  receivePackets: number;
  transmitPackets: number;
  receiveErrors: number;
  transmitErrors: number;
  receiveDropped: number;
  transmitDropped: number;
}

export interface GuestMemory {
  /** All the RAM the guest's kernel manages (MemTotal). */
  totalBytes?: number;
  /** RAM nothing uses (MemFree). */
  unusedBytes?: number;
  /** RAM a program could get without swapping (MemAvailable). */
  availableBytes?: number;
}

export interface VmUsage {
  /** QEMU's CPU time: the vCPUs and everything QEMU does for them. */
  cpuSeconds: number;
  /** Each vCPU thread's CPU time, by QEMU's cpu-index. */
  vcpuSeconds: { id: number; seconds: number }[];
  /** QEMU's resident memory. */
  residentBytes: number;
  /** The RAM the guest has now (the balloon's actual size). */
  domainBytes?: number;
  guestMemory: GuestMemory;
  drives: DriveUsage[];
  interfaces: InterfaceUsage[];
  guestAgentConnected: boolean;
  /** Since the guest was let run in this pod. */
  uptimeSeconds?: number;
}

/** CPU seconds (user and system) of a /proc/<pid>/stat or /proc/<pid>/task/<tid>/stat line. */
export function procCpuSeconds(stat: string): number {
  // The command name (2nd field) is in parentheses and may hold spaces: count from after it.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const utime = Number(fields[11]);
  const stime = Number(fields[12]);
  return (utime + stime) / TICKS_PER_SECOND;
}

/** VmRSS of a /proc/<pid>/status text, in bytes. */
export function procResidentBytes(status: string): number {
  const match = /^VmRSS:\s+(\d+)\s+kB$/m.exec(status);
  return match ? Number(match[1]) * 1024 : 0;
}

export const CpusFast = z.array(z.object({ 'cpu-index': z.number(), 'thread-id': z.number() }));

const Counters = z.object({
  rd_bytes: z.number(),
  wr_bytes: z.number(),
  rd_operations: z.number(),
  wr_operations: z.number(),
  flush_operations: z.number(),
  rd_total_time_ns: z.number(),
  wr_total_time_ns: z.number(),
  flush_total_time_ns: z.number(),
});
export const BlockStats = z.array(
  z.object({ device: z.string().optional(), qdev: z.string().optional(), stats: Counters }),
);

/**
 * The drive's name as the runner config has it: a legacy drive's device id (`cd0`) or the
 * `-device` id of a blockdev (`/machine/peripheral/disk0-device/virtio-backend` → `disk0`,
 * `hotplug-data-device` → `hotplug-data`). Block nodes no device uses are not the guest's drives.
 */
export function driveName(entry: { device?: string; qdev?: string }): string | undefined {
  const qdev = entry.qdev?.replace(/^\/machine\/peripheral\//, '').split('/')[0];
  const name = qdev || entry.device;
  return name ? name.replace(/-device$/, '') : undefined;
}

export function driveUsage(reply: z.infer<typeof BlockStats>): DriveUsage[] {
  return reply.flatMap((entry) => {
    const drive = driveName(entry);
    if (!drive) return [];
    const s = entry.stats;
    return [
      {
        drive,
        readBytes: s.rd_bytes,
        writeBytes: s.wr_bytes,
        readOperations: s.rd_operations,
        writeOperations: s.wr_operations,
        flushOperations: s.flush_operations,
        readSeconds: s.rd_total_time_ns / 1e9,
        writeSeconds: s.wr_total_time_ns / 1e9,
        flushSeconds: s.flush_total_time_ns / 1e9,
      },
    ];
  });
}

export const BalloonStats = z.object({ stats: z.record(z.string(), z.number()) });

export function guestMemory(reply: z.infer<typeof BalloonStats>): GuestMemory {
  const known = (name: string) => {
    const value = reply.stats[name];
    return value === undefined || value >= UNKNOWN_STAT ? undefined : value;
  };
  return {
    totalBytes: known('stat-total-memory'),
    unusedBytes: known('stat-free-memory'),
    availableBytes: known('stat-available-memory'),
  };
}

/** The VM's NICs as QEMU has them: device id and MAC address. */
export const RxFilters = z.array(z.object({ name: z.string(), 'main-mac': z.string() }));

const Statistics = z.object({
  'rx-bytes': z.number(),
  'tx-bytes': z.number(),
  'rx-packets': z.number(),
  'tx-packets': z.number(),
  'rx-errs': z.number(),
  'tx-errs': z.number(),
  'rx-dropped': z.number(),
  'tx-dropped': z.number(),
});
export const GuestInterfaces = z.array(
  z.object({
    name: z.string(),
    'hardware-address': z.string().optional(),
    statistics: Statistics.optional(),
  }),
);

/**
 * Each NIC's traffic as the guest counts it, named by QEMU's device id. Only interfaces with the
 * MAC of one of QEMU's NICs count: what the guest makes up itself (bridges, VLANs, thousands of
 * dummies) would give the series no bound.
 */
export function interfaceUsage(
  nics: z.infer<typeof RxFilters>,
  guest: z.infer<typeof GuestInterfaces>,
): InterfaceUsage[] {
  return nics.flatMap((nic) => {
    const mac = nic['main-mac'].toLowerCase();
    const stats = guest.find((itf) => itf['hardware-address']?.toLowerCase() === mac)?.statistics;
    if (!stats) return [];
    return [
      {
        interface: nic.name,
        receiveBytes: stats['rx-bytes'],
        transmitBytes: stats['tx-bytes'],
        receivePackets: stats['rx-packets'],
        transmitPackets: stats['tx-packets'],
        receiveErrors: stats['rx-errs'],
        transmitErrors: stats['tx-errs'],
        receiveDropped: stats['rx-dropped'],
        transmitDropped: stats['tx-dropped'],
      },
    ];
  });
}

const sum = (values: number[]) => values.reduce((total, value) => total + value, 0);

/** What the VM's usage history keeps of a sample: totals over its drives and NICs. */
export function usageRecord(usage: VmUsage): UsageRecord {
  const nics = usage.interfaces;
  return {
    cpu: usage.cpuSeconds,
    resident: usage.residentBytes,
    domain: usage.domainBytes,
    usable: usage.guestMemory.availableBytes,
    diskRead: sum(usage.drives.map((drive) => drive.readBytes)),
    diskWrite: sum(usage.drives.map((drive) => drive.writeBytes)),
    netReceive: nics.length > 0 ? sum(nics.map((nic) => nic.receiveBytes)) : undefined,
    netTransmit: nics.length > 0 ? sum(nics.map((nic) => nic.transmitBytes)) : undefined,
  };
}
