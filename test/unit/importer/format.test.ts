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
  it('reads registry, repository and tag or digest as docker does', () => {
    expect(parseImageReference('10.0.0.1:5000/test-guest:1')).toEqual({
      registry: '10.0.0.1:5000',
      repository: 'test-guest',
      reference: '1',
    });
    expect(parseImageReference('quay.io/containerdisks/fedora:40')).toEqual({
      registry: 'quay.io',
      repository: 'containerdisks/fedora',
      reference: '40',
    });
    expect(parseImageReference('debian')).toEqual({
      registry: 'registry-1.docker.io',
      repository: 'library/debian',
      reference: 'latest',
    });
    expect(parseImageReference('kubevirt/cirros-container-disk-demo')).toMatchObject({
      registry: 'registry-1.docker.io',
      repository: 'kubevirt/cirros-container-disk-demo',
    });
    const digest = `sha256:${'a'.repeat(64)}`;
    expect(parseImageReference(`localhost/disks/x@${digest}`)).toEqual({
      registry: 'localhost',
      repository: 'disks/x',
      reference: digest,
    });
  });
});
