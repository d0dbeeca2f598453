// Disk image files for import tests and benchmarks, made with the real tools.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** `qemu-img convert` of `from` (raw) to `to` in `format` (qcow2, vmdk…). */
export async function convertRawImage(from: string, to: string, format: string): Promise<void> {
  await run('qemu-img', ['convert', ...['-f', 'raw', '-O', format], from, to]);
}
