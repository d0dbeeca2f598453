import { readdirSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const checkout = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/**
 * The vmop launcher of this checkout (bin/vmop: one node process, the bundled CLI while it is
 * fresh, else the source through tsx): what the local beds and the tests run for vmop's processes.
 */
export const VMOP_BIN = join(checkout, 'bin/vmop');

/** Whether a file below `dir` changed after `since` (ms). */
function changedAfter(dir: string, since: number): boolean {
  return readdirSync(dir, { withFileTypes: true }).some((entry) => {
    const path = join(dir, entry.name);
    return entry.isDirectory() ? changedAfter(path, since) : statSync(path).mtimeMs > since;
  });
}

/**
 * bin/vmop's choice as node arguments, for a process started without a PATH to find bash or node
 * by (spawn process.execPath with these, then vmop's own arguments).
 */
export function vmopNodeArgs(): string[] {
  const built = statSync(join(checkout, 'dist/.from-src'), { throwIfNoEntry: false });
  return built && !changedAfter(join(checkout, 'src'), built.mtimeMs)
    ? [join(checkout, 'dist/cli/main.js')]
    : [
        '--import',
        `file://${join(checkout, 'node_modules/tsx/dist/loader.mjs')}`,
        join(checkout, 'src/cli/main.ts'),
      ];
}
