// A downloaded qcow2 image: checked (no backing or data file may pull other files in, it must fit)
// and converted onto the disk with qemu-img.
import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { z } from 'zod';
import { ImportFailure } from './failure.js';
import type { Target } from './target.js';

const run = promisify(execFile);

const Qcow2Info = z.object({
  'virtual-size': z.number(),
  'backing-filename': z.string().optional(),
  'format-specific': z
    .object({ data: z.object({ 'data-file': z.string().optional() }).passthrough().optional() })
    .passthrough()
    .optional(),
});

/** Refuses what must not be converted; the image's file has been checked against its sha256 before. */
export async function checkQcow2(file: string, target: Target): Promise<void> {
  let output: string;
  try {
    ({ stdout: output } = await run('qemu-img', ['info', '--output=json', '-f', 'qcow2', file]));
  } catch (err) {
    const stderr = (err as { stderr?: string }).stderr?.trim();
    throw new ImportFailure('CorruptImage', `the qcow2 image is broken: ${stderr || String(err)}`);
  }
  const info = Qcow2Info.parse(JSON.parse(output));
  // Another file named in the image would be read from the importer's file system into the disk.
  const foreign = info['backing-filename'] ?? info['format-specific']?.data?.['data-file'];
  if (foreign !== undefined)
    throw new ImportFailure(
      'UnsafeImage',
      `the qcow2 image refers to another file (${JSON.stringify(foreign)}); only self-contained images are imported`,
    );
  if (info['virtual-size'] > target.size)
    throw new ImportFailure(
      'TooLarge',
      `the image is larger than the disk: its virtual size is ${info['virtual-size']} bytes, its claim holds ${target.size}`,
    );
}

/** Converts `file` onto the target; `onPercent` gets qemu-img's progress (0–100). */
export async function convertQcow2(
  file: string,
  target: Target,
  onPercent: (percent: number) => void,
): Promise<void> {
  const args = ['convert', '-p', '-f', 'qcow2', '-O', 'raw', '-n'];
  if (target.zeroed) args.push('--target-is-zero');
  const child = spawn('qemu-img', [...args, file, target.path], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  child.stdout.on('data', (chunk: Buffer) => {
    const matches = [...chunk.toString().matchAll(/\((\d+(?:\.\d+)?)\/100%\)/g)];
    const last = matches.at(-1);
    if (last) onPercent(Number(last[1]));
  });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  if (code !== 0)
    throw new ImportFailure('CorruptImage', `converting the qcow2 image failed: ${stderr.trim()}`);
}
