import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { stringify as toYaml } from 'yaml';
import type { CloudInitConfig } from '../api/runner-config.js';
import { requireExecutable } from './executable.js';

const run = promisify(execFile);

/** The NoCloud files: meta-data, user-data ("#cloud-config" first) and, when configured, network-config. */
export function noCloudFiles(cloudInit: CloudInitConfig): Record<string, string> {
  // cloud-init reruns per-instance setup when the instance-id changes: derive it from the data.
  const digest = createHash('sha256').update(JSON.stringify(cloudInit)).digest('hex').slice(0, 12);
  const files: Record<string, string> = {
    'meta-data': toYaml({ 'instance-id': `v${digest}`, ...cloudInit.metaData }),
    'user-data': `#cloud-config\n${toYaml(cloudInit.userData ?? {})}`,
  };
  if (cloudInit.networkConfig) files['network-config'] = toYaml(cloudInit.networkConfig);
  return files;
}

/**
 * Writes a vfat image labelled CIDATA with the NoCloud files, without root: mkfs.vfat formats the
 * file, mtools' mcopy fills it. (mformat is not used: its boot sector carries a partition entry
 * that makes Linux see a phantom partition vda1 beside vda.)
 */
export async function buildNoCloudImage(image: string, cloudInit: CloudInitConfig, searchPath?: string) {
  const mkfs = requireExecutable(
    'mkfs.vfat (dosfstools)',
    ['mkfs.vfat', '/usr/sbin/mkfs.vfat', '/sbin/mkfs.vfat'],
    searchPath,
  );
  const mcopy = requireExecutable('mcopy (mtools)', ['mcopy'], searchPath);
  const files = noCloudFiles(cloudInit);
  const bytes = Object.values(files).reduce((sum, text) => sum + Buffer.byteLength(text), 0);
  // Room for the files and the FAT structures; never smaller than a floppy.
  const kibibytes = Math.max(1440, 2 * Math.ceil(bytes / 1024) + 256);
  const staging = await mkdtemp(path.join(path.dirname(image), '.cloud-init-'));
  try {
    await rm(image, { force: true });
    await run(mkfs, ['-C', '-n', 'CIDATA', image, String(kibibytes)]);
    const env = { ...process.env, MTOOLS_SKIP_CHECK: '1' };
    for (const [name, text] of Object.entries(files)) {
      await writeFile(path.join(staging, name), text);
      await run(mcopy, ['-i', image, path.join(staging, name), `::${name}`], { env });
    }
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
}
