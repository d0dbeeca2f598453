import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The vmop launcher of this checkout (node + tsx loader in one process, so signals reach vmop): what the local beds run for vmop's own processes. */
export const VMOP_BIN = resolve(dirname(fileURLToPath(import.meta.url)), '../../bin/vmop');
