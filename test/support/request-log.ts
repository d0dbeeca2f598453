// Reads what request-log.mjs wrote: a process's own requests (a manager's, in tests and benchmarks).
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const REQUEST_LOG_PRELOAD = fileURLToPath(new URL('./request-log.mjs', import.meta.url));

/** A fresh directory for the logs; pass it as VMOP_REQUEST_LOG. */
export const requestLogDir = (): string => mkdtempSync(path.join(tmpdir(), 'vmop-bench-requests-'));

export interface LoggedRequest {
  time: number;
  method: string;
  path: string;
}

/** The requests logged in `dir` within [from, to). */
export function loggedRequests(dir: string, from: number, to: number): LoggedRequest[] {
  return readdirSync(dir).flatMap((file) =>
    readFileSync(path.join(dir, file), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((line) => {
        const [time, method, requestPath] = line.split(' ');
        return { time: Number(time), method: method!, path: requestPath! };
      })
      .filter((request) => request.time >= from && request.time < to),
  );
}

/** The paths of GETs of one named object (not lists, watches or discovery) within [from, to). */
export const objectReadPaths = (dir: string, from: number, to: number): string[] =>
  loggedRequests(dir, from, to)
    .filter((r) => r.method === 'GET' && /\/namespaces\/[^/]+\/[^/]+\/[^/]+/.test(r.path))
    .map((r) => r.path);

export const objectReads = (dir: string, from: number, to: number): number =>
  objectReadPaths(dir, from, to).length;
