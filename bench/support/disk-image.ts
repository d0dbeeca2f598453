// A disk image as an OS disk looks: 40 % written (random, so it does not compress), the rest zeros
// (4 MiB of data in every 10 MiB).
import { randomBytes } from 'node:crypto';
import { open } from 'node:fs/promises';

const MiB = 1024 ** 2;

export async function makeDiskImage(file: string, bytes: number): Promise<void> {
  const handle = await open(file, 'w');
  for (let offset = 0; offset < bytes; offset += 10 * MiB)
    await handle.write(randomBytes(4 * MiB), 0, Math.min(4 * MiB, bytes - offset), offset);
  await handle.truncate(bytes);
  await handle.close();
}
