import { describe, expect, it } from 'vitest';
import { compressionOf, formatOf } from '../../../src/importer/format.js';
import { parseImageReference } from '../../../src/importer/registry.js';

const bytes = (...values: number[]) => Buffer.concat([Buffer.from(values), Buffer.alloc(512)]);
const text = (value: string) => Buffer.concat([Buffer.from(value, 'latin1'), Buffer.alloc(512)]);

describe('image format detection', () => {
  it('peels xz and gzip off first', () => {
    expect(compressionOf(bytes(0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00))).toBe('xz');
    expect(compressionOf(bytes(0x1f, 0x8b, 0x08))).toBe('gzip');
    expect(compressionOf(text('QFI\xfb'))).toBeUndefined();
  });

  it('tells qcow2 from raw; raw is what nothing else claims (an MBR, a file system, zeros)', () => {
    expect(formatOf(text('QFI\xfb\0\0\0\x03'))).toEqual({ format: 'qcow2' });
    expect(formatOf(Buffer.alloc(512))).toEqual({ format: 'raw' });
    expect(formatOf(text('\xeb\x3c\x90mkfs.fat'))).toEqual({ format: 'raw' });
  });

  it('names what it does not import', () => {
    expect(formatOf(text('KDMV'))).toEqual({ unknown: 'a VMDK image' });
    expect(formatOf(text('vhdxfile'))).toEqual({ unknown: 'a VHDX image' });
    expect(formatOf(bytes(0x28, 0xb5, 0x2f, 0xfd))).toEqual({ unknown: 'zstd-compressed data' });
    expect(formatOf(text('  <!DOCTYPE html><html>'))).toEqual({ unknown: 'an HTML page' });
    expect(formatOf(bytes(0x1f, 0x8b))).toEqual({ unknown: 'gzip-compressed data inside compressed data' });
  });
});

describe('image references', () => {
  const digest = `sha256:${'a'.repeat(64)}`;
  it.each([
    ['10.0.0.1:5000/test-guest:1', '10.0.0.1:5000', 'test-guest', '1'],
    ['quay.io/containerdisks/fedora:40', 'quay.io', 'containerdisks/fedora', '40'],
    ['debian', 'registry-1.docker.io', 'library/debian', 'latest'],
    [
      'kubevirt/cirros-container-disk-demo',
      'registry-1.docker.io',
      'kubevirt/cirros-container-disk-demo',
      'latest',
    ],
    [`localhost/disks/x@${digest}`, 'localhost', 'disks/x', digest],
  ])(
    '%s: registry, repository and tag or digest as docker reads them',
    (image, registry, repository, reference) => {
      expect(parseImageReference(image)).toEqual({ registry, repository, reference });
    },
  );
});
