import { describe, expect, it } from 'vitest';
import { fingerprintMismatch, type MachineFingerprint } from '../../../src/runner/migration/fingerprint.js';

const source: MachineFingerprint = {
  machine: 'pc-q35-7.2-machine',
  ramBytes: 256 << 20,
  devices: [
    'peripheral-anon/device[0]: virtio-rng-pci',
    'peripheral/cpu-1: qemu64-x86_64-cpu',
    'peripheral/disk-0-device: virtio-blk-pci',
  ],
};

describe('fingerprintMismatch', () => {
  it('lets a QEMU with the same machine type, RAM and devices take the state', () => {
    expect(
      fingerprintMismatch(source, { ...source, devices: [...source.devices].reverse() }),
    ).toBeUndefined();
  });

  it('names every difference: machine type, RAM, and the devices on one side only', () => {
    const here: MachineFingerprint = {
      machine: 'pc-q35-8.0-machine',
      ramBytes: 512 << 20,
      devices: ['peripheral-anon/device[0]: virtio-rng-pci', 'peripheral/disk-0-device: virtio-scsi-pci'],
    };
    expect(fingerprintMismatch(source, here)).toBe(
      "the target's QEMU does not match the source's (machine pc-q35-8.0-machine here, pc-q35-7.2-machine at the source; " +
        `${512 << 20} bytes of RAM here, ${256 << 20} at the source; ` +
        'only at the source: peripheral/cpu-1: qemu64-x86_64-cpu, peripheral/disk-0-device: virtio-blk-pci; ' +
        'only here: peripheral/disk-0-device: virtio-scsi-pci)',
    );
  });
});
