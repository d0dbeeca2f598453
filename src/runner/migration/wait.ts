import { existsSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

/** Waits until `file` exists (a Secret volume kubelet fills in): throws after `timeoutMs` or when `given up`. */
export async function waitForFile(file: string, timeoutMs: number, givenUp: () => boolean): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!existsSync(file)) {
    if (givenUp()) throw new Error('the migration was cancelled');
    if (Date.now() > deadline) throw new Error(`${file} did not appear within ${timeoutMs / 1000} s`);
    await sleep(100);
  }
}
