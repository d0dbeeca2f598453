// Writes a projected volume the way kubelet's AtomicWriter does, so readers never see a mix of
// old and new files: each version lives in its own `..<timestamp>` directory, `..data` points to
// the current one and is swapped by renaming a temporary symlink over it, and each top-level name
// is a symlink through `..data`.
import {
  chmod,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  readlink,
  rename,
  rm,
  symlink,
  writeFile,
} from 'node:fs/promises';
import path from 'node:path';
import { isSafeRelativePath, type Payload } from './projection.js';

const DATA_DIR = '..data';
const NEW_DATA_DIR = '..data_tmp';

/** Kubelet's version directory names: `..2006_01_02_15_04_05.<random>`. */
function versionPrefix(now: Date): string {
  return `..${now
    .toISOString()
    .replace(/\.\d+Z$/, '')
    .replace(/[-T:]/g, '_')}.`;
}

async function filesIn(dir: string, prefix = ''): Promise<string[]> {
  const found: string[] = [];
  for (const entry of await readdir(path.join(dir, prefix), { withFileTypes: true })) {
    const relative = path.join(prefix, entry.name);
    if (entry.isDirectory()) found.push(...(await filesIn(dir, relative)));
    else found.push(relative);
  }
  return found;
}

async function sameAsWritten(versionDir: string, payload: Payload): Promise<boolean> {
  const present = await filesIn(versionDir).catch(() => undefined);
  if (!present || present.length !== payload.size) return false;
  for (const [file, { content }] of payload) {
    const existing = await readFile(path.join(versionDir, file)).catch(() => undefined);
    if (!existing?.equals(content)) return false;
  }
  return true;
}

const topLevel = (files: Iterable<string>) => new Set([...files].map((file) => file.split('/')[0]!));

/**
 * Makes `dir` hold exactly `payload`; resolves to false when it already did (nothing is written).
 * Entries the writer did not create (say, a mount point made inside the volume) are left alone.
 */
export async function writePayload(dir: string, payload: Payload, now = new Date()): Promise<boolean> {
  for (const file of payload.keys()) {
    if (!isSafeRelativePath(file)) throw new Error(`refusing to write ${JSON.stringify(file)} into ${dir}`);
  }
  await mkdir(dir, { recursive: true });
  const oldVersion = await readlink(path.join(dir, DATA_DIR)).catch(() => undefined);
  const oldFiles = oldVersion ? await filesIn(path.join(dir, oldVersion)).catch(() => []) : [];
  if (oldVersion && (await sameAsWritten(path.join(dir, oldVersion), payload))) return false;

  const versionDir = await mkdtemp(path.join(dir, versionPrefix(now)));
  await chmod(versionDir, 0o755);
  for (const [file, { content, mode }] of payload) {
    const target = path.join(versionDir, file);
    await mkdir(path.dirname(target), { recursive: true });
    await writeFile(target, content, { mode });
    await chmod(target, mode); // writeFile's mode is subject to the umask
  }
  const newLink = path.join(dir, NEW_DATA_DIR);
  await rm(newLink, { force: true });
  await symlink(path.basename(versionDir), newLink);
  await rename(newLink, path.join(dir, DATA_DIR));

  const wanted = topLevel(payload.keys());
  for (const name of wanted) {
    await symlink(path.join(DATA_DIR, name), path.join(dir, name)).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'EEXIST') throw err;
    });
  }
  for (const name of topLevel(oldFiles)) {
    if (!wanted.has(name)) await rm(path.join(dir, name), { force: true });
  }
  if (oldVersion) await rm(path.join(dir, oldVersion), { recursive: true, force: true });
  return true;
}
