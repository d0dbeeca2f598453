// Which kind of image a file is, from its first bytes (pure). Compressions are peeled off first,
// then the image format is told; raw is whatever is not recognised as something else.

export type Compression = 'xz' | 'gzip';
export type ImageFormat = 'raw' | 'qcow2';

/** Enough bytes to tell every kind below apart. */
export const HEAD_BYTES = 512;

const startsWith = (head: Buffer, magic: number[] | string) =>
  head
    .subarray(0, magic.length)
    .equals(typeof magic === 'string' ? Buffer.from(magic, 'latin1') : Buffer.from(magic));

export function compressionOf(head: Buffer): Compression | undefined {
  if (startsWith(head, [0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00])) return 'xz';
  if (startsWith(head, [0x1f, 0x8b])) return 'gzip';
  return undefined;
}

/** Formats and compressions vmop does not import, each with a name people know. */
const UNSUPPORTED: Array<[number[] | string, string]> = [
  [[0x28, 0xb5, 0x2f, 0xfd], 'zstd-compressed data'],
  ['BZh', 'bzip2-compressed data'],
  [[0x50, 0x4b, 0x03, 0x04], 'a zip archive'],
  ['KDMV', 'a VMDK image'],
  ['vhdxfile', 'a VHDX image'],
  ['conectix', 'a dynamic VHD image'],
  ['<<< ', 'a VirtualBox VDI image'],
  ['QED\0', 'a QED image'],
];

/** The image format of (decompressed) data, or why it cannot be imported. */
export function formatOf(head: Buffer): { format: ImageFormat } | { unknown: string } {
  if (startsWith(head, 'QFI\xfb')) return { format: 'qcow2' };
  const compression = compressionOf(head);
  if (compression) return { unknown: `${compression}-compressed data inside compressed data` };
  for (const [magic, name] of UNSUPPORTED) if (startsWith(head, magic)) return { unknown: name };
  // A download page or an error page instead of the image: the most common wrong URL.
  const text = head.subarray(0, 256).toString('latin1').trimStart().toLowerCase();
  if (text.startsWith('<!doctype html') || text.startsWith('<html')) return { unknown: 'an HTML page' };
  return { format: 'raw' };
}
