import { describe, expect, it } from 'vitest';
import {
  driveName,
  guestMemory,
  interfaceUsage,
  procCpuSeconds,
  procResidentBytes,
} from '../../../src/runner/metrics/usage.js';

describe("the runner's metrics: reading what QEMU, /proc and the guest agent say", () => {
  it('reads CPU seconds from a stat line whose command name has spaces and parentheses', () => {
    // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime …
    const stat = '4242 (CPU 0/TCG (x)) R 1 1 1 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0';
    expect(procCpuSeconds(stat)).toBe(3);
  });

  it("reads QEMU's resident memory", () => {
    expect(procResidentBytes('Name:\tqemu\nVmRSS:\t  204800 kB\nVmSwap:\t0 kB\n')).toBe(200 * 1024 * 1024);
  });

  it("names drives by the runner config's ids, and leaves block nodes without a device out", () => {
    expect(driveName({ device: 'drive-cd0', qdev: 'cd0' })).toBe('cd0');
    expect(driveName({ device: '', qdev: '/machine/peripheral/disk0-device/virtio-backend' })).toBe('disk0');
    expect(driveName({ device: '', qdev: 'hotplug-data-device' })).toBe('hotplug-data');
    expect(driveName({ device: '' })).toBeUndefined();
  });

  it('leaves out what the guest balloon driver has not reported (QEMU says 2^64-1)', () => {
    expect(
      guestMemory({
        stats: { 'stat-total-memory': 2 ** 64 - 1, 'stat-free-memory': 1024, 'stat-available-memory': 2048 },
      }),
    ).toEqual({ totalBytes: undefined, unusedBytes: 1024, availableBytes: 2048 });
  });

  it("counts only the guest's interfaces with the MAC of one of QEMU's NICs, named by QEMU", () => {
    const statistics = {
      'rx-bytes': 10,
      'tx-bytes': 20,
      'rx-packets': 1,
      'tx-packets': 2,
      'rx-errs': 0,
      'tx-errs': 0,
      'rx-dropped': 0,
      'tx-dropped': 0,
    };
    const usage = interfaceUsage(
      [{ name: 'virtio-net-pci.0', 'main-mac': '52:54:00:12:34:56' }],
      [
        { name: 'lo', 'hardware-address': '00:00:00:00:00:00', statistics },
        { name: 'eth0', 'hardware-address': '52:54:00:12:34:56', statistics },
        { name: 'dummy0', 'hardware-address': 'aa:bb:cc:dd:ee:ff', statistics },
      ],
    );
    expect(usage).toEqual([
      expect.objectContaining({ interface: 'virtio-net-pci.0', receiveBytes: 10, transmitPackets: 2 }),
    ]);
  });
});
