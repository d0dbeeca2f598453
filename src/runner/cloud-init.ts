import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { parse as parseYaml, stringify } from 'yaml';
import { CLOUD_INIT_SECRET_KEYS } from '../api/provisioning.js';
import type { CloudInitConfig } from '../api/runner-config.js';
import { ConfigError } from './config-error.js';
import { requireExecutable } from './executable.js';

const run = promisify(execFile);
/** YAML with no line folded: an SSH key stays one line, as simple parsers (and people) expect. */
const toYaml = (value: unknown) => stringify(value, { lineWidth: 0 });

/** The texts of a cloud-init Secret (its files), used as written. */
export interface CloudInitSecret {
  userData?: string;
  metaData?: string;
  networkConfig?: string;
}

/** meta-data from the Secret: a YAML mapping merged over the config's; anything else is refused. */
function secretMetaData(text: string | undefined): Record<string, unknown> {
  if (text === undefined) return {};
  let parsed: unknown;
  try {
    parsed = parseYaml(text);
  } catch {
    parsed = undefined;
  }
  if (parsed === null || parsed === undefined) return {};
  if (typeof parsed !== 'object' || Array.isArray(parsed)) {
    // Not the value: it may be secret.
    throw new ConfigError('cloudInit.secretDir', "the Secret's metaData is not a YAML mapping");
  }
  return parsed as Record<string, unknown>;
}

/**
 * The NoCloud files: meta-data, user-data and, when configured, network-config. The config's
 * parts are YAML (user-data gets "#cloud-config" first); a Secret's texts are used as written.
 */
export function noCloudFiles(
  cloudInit: CloudInitConfig,
  secret: CloudInitSecret = {},
): Record<string, string> {
  const { secretDir: _, ...config } = cloudInit;
  // cloud-init reruns per-instance setup when the instance-id changes: derive it from the data.
  const digest = createHash('sha256').update(JSON.stringify({ config, secret })).digest('hex').slice(0, 12);
  const metaData = { 'instance-id': `v${digest}`, ...config.metaData, ...secretMetaData(secret.metaData) };
  const files: Record<string, string> = {
    'meta-data': toYaml(metaData),
    'user-data': secret.userData ?? `#cloud-config\n${toYaml(config.userData ?? {})}`,
  };
  const networkConfig = secret.networkConfig ?? (config.networkConfig && toYaml(config.networkConfig));
  if (networkConfig) files['network-config'] = networkConfig;
  return files;
}

/** Reads the files of a cloud-init Secret volume; the user data must be there. */
export async function readCloudInitSecret(dir: string): Promise<CloudInitSecret> {
  const read = async (names: readonly string[]) => {
    for (const name of names) {
      const text = await readFile(path.join(dir, name), 'utf8').catch(() => undefined);
      if (text !== undefined) return text;
    }
    return undefined;
  };
  const secret: CloudInitSecret = {
    userData: await read(CLOUD_INIT_SECRET_KEYS.userData),
    metaData: await read(CLOUD_INIT_SECRET_KEYS.metaData),
    networkConfig: await read(CLOUD_INIT_SECRET_KEYS.networkConfig),
  };
  if (secret.userData === undefined) {
    const expected = CLOUD_INIT_SECRET_KEYS.userData.join(' or ');
    throw new ConfigError('cloudInit.secretDir', `the cloud-init Secret has no ${expected} (in ${dir})`);
  }
  return secret;
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
  const secret = cloudInit.secretDir ? await readCloudInitSecret(cloudInit.secretDir) : undefined;
  const files = noCloudFiles(cloudInit, secret);
  const bytes = Object.values(files).reduce((sum, text) => sum + Buffer.byteLength(text), 0);
  // Room for the files and the FAT structures; never smaller than a floppy.
  const kibibytes = Math.max(1440, 2 * Math.ceil(bytes / 1024) + 256);
  const staging = await mkdtemp(path.join(path.dirname(image), '.cloud-init-'));
  try {
    await rm(image, { force: true });
    await run(mkfs, ['-C', '-n', 'CIDATA', image, String(kibibytes)]);
    const env = { ...process.env, MTOOLS_SKIP_CHECK: '1' };
    for (const [name, text] of Object.entries(files)) {
      await writeFile(path.join(staging, name), text, { mode: 0o600 });
      await run(mcopy, ['-i', image, path.join(staging, name), `::${name}`], { env });
    }
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
}
