// Where `vmop vm export -o` writes a download: a raw disk's runs of zeros stay holes in the file
// (a 10 GiB disk with 1 GiB of data takes 1 GiB), and the data between them goes out in large
// writes. A download that resumes (a Range request) goes on at `written`.
import type { FileHandle } from 'node:fs/promises';

/** Zero runs of this size, aligned, are not written: the file stays sparse. */
export const SPARSE_BLOCK = 64 * 1024;
const ZEROS = Buffer.alloc(SPARSE_BLOCK);

export class SparseWriter {
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private position = 0;

  /** `sparse` false writes every byte (a qcow2 image has its own holes). */
  constructor(
    private readonly file: FileHandle,
    private readonly sparse: boolean,
  ) {}

  /** The bytes taken so far: where a resumed download goes on. */
  get written(): number {
    return this.position + this.pendingBytes;
  }

  async write(chunk: Buffer): Promise<void> {
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    // A megabyte at a time; sparse, whole blocks only (a block split over two chunks is judged whole).
    if (this.pendingBytes >= 16 * SPARSE_BLOCK)
      await this.flush(this.pendingBytes - (this.sparse ? this.pendingBytes % SPARSE_BLOCK : 0));
  }

  /** Writes what is left and sets the file's length (zero blocks at the end are holes too). */
  async finish(): Promise<void> {
    await this.flush(this.pendingBytes);
    await this.file.truncate(this.position);
  }

  /** Writes the first `length` pending bytes: sparse, without their zero blocks; else in one write. */
  private async flush(length: number): Promise<void> {
    const all = this.pending.length === 1 ? this.pending[0]! : Buffer.concat(this.pending);
    if (this.sparse) await this.writeDataRuns(all, length);
    else if (length > 0) await this.writeAt(all, 0, length);
    this.position += length;
    const rest = all.subarray(length);
    this.pending = rest.length > 0 ? [rest] : [];
    this.pendingBytes = rest.length;
  }

  /** Each run of data blocks in `all`'s first `length` bytes in one write; zero blocks skipped. */
  private async writeDataRuns(all: Buffer, length: number): Promise<void> {
    let dataStart = -1;
    for (let offset = 0; offset < length; offset += SPARSE_BLOCK) {
      const end = Math.min(offset + SPARSE_BLOCK, length);
      const zero = all.subarray(offset, end).equals(ZEROS.subarray(0, end - offset));
      if (!zero && dataStart < 0) dataStart = offset;
      if (zero && dataStart >= 0) {
        await this.writeAt(all, dataStart, offset);
        dataStart = -1;
      }
    }
    if (dataStart >= 0) await this.writeAt(all, dataStart, length);
  }

  private async writeAt(all: Buffer, start: number, end: number): Promise<void> {
    await this.file.write(all, start, end - start, this.position + start);
  }
}
