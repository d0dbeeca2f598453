import { existsSync } from 'node:fs';
import { copyFile, access } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConfigError } from '../config-error.js';

export const SITE_TEMPLATE_DIR = '/opt/vmrunner/templates';

/**
 * The templates of a checkout: `templates/` at the package root, found from source or build output.
 * The runner image has none there; it ships them in SITE_TEMPLATE_DIR.
 */
export function shippedTemplateDir(): string | undefined {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!existsSync(path.join(dir, 'package.json')) || !existsSync(path.join(dir, 'templates'))) {
    const parent = path.dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
  return path.join(dir, 'templates');
}

/** VMOP_TEMPLATE_PATH (colon separated) first, then /opt/vmrunner/templates, then the checkout's. */
export function templateSearchPath(env: NodeJS.ProcessEnv): string[] {
  const extra = (env.VMOP_TEMPLATE_PATH ?? '').split(path.delimiter).filter(Boolean);
  const shipped = shippedTemplateDir();
  return [...extra, SITE_TEMPLATE_DIR, ...(shipped ? [shipped] : [])];
}

export function findTemplate(name: string, searchPath: string[]): string {
  if (path.isAbsolute(name)) {
    if (existsSync(name)) return name;
    throw new ConfigError('template', `template ${name} does not exist`);
  }
  const found = searchPath.map((dir) => path.join(dir, name)).find((file) => existsSync(file));
  if (!found) throw new ConfigError('template', `template "${name}" not found in ${searchPath.join(', ')}`);
  return found;
}

/**
 * As upstream: the template is copied into the data directory when the VM starts for the first
 * time, and later starts use that copy (so a VM keeps its VM type) unless `update` is set.
 */
export async function templateForVm(
  name: string,
  options: { searchPath: string[]; dataDir: string; update: boolean },
): Promise<string> {
  const copy = path.join(options.dataDir, path.basename(name));
  const haveCopy = await access(copy).then(
    () => true,
    () => false,
  );
  if (haveCopy && !options.update) return copy;
  await copyFile(findTemplate(name, options.searchPath), copy);
  return copy;
}
