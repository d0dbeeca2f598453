// Reads what bench/support/request-log.mjs wrote: a benchmarked process's own requests.
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const REQUEST_LOG_PRELOAD = fileURLToPath(new URL('./request-log.mjs', import.meta.url));

/** A fresh directory for the logs; pass it as VMOP_BENCH_REQUEST_LOG. */
export const requestLogDir = (): string => mkdtempSync(path.join(tmpdir(), 'vmop-bench-requests-'));

/** GETs of one named object (not lists, watches or discovery) logged in `dir` within [from, to). */
export function objectReads(dir: string, from: number, to: number): number {
  let reads = 0;
  for (const file of readdirSync(dir)) {
    for (const line of readFileSync(path.join(dir, file), 'utf8').split('\n')) {
      const [time, method, requestPath] = line.split(' ');
      if (method !== 'GET' || Number(time) < from || Number(time) >= to) continue;
      if (/\/namespaces\/[^/]+\/[^/]+\/[^/]+/.test(requestPath ?? '')) reads++;
    }
  }
  return reads;
}
