import { existsSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../util/logger.js';
import { describeExit } from '../util/process.js';
import { spawnChild, type Child } from './child.js';

/**
 * Starts the software TPM and waits until its control socket exists, so qemu can connect to it.
 * The templates pass `--terminate`: swtpm exits when qemu goes away.
 */
export async function startSwtpm(options: {
  executable: string;
  args: string[];
  environment?: Record<string, string>;
  stateDir: string;
  socket: string;
  logger: Logger;
  searchPath?: string;
  timeoutMs?: number;
}): Promise<Child> {
  await mkdir(options.stateDir, { recursive: true, mode: 0o700 });
  await rm(options.socket, { force: true });
  const swtpm = await spawnChild('swtpm', options.executable, options.args, options);
  const deadline = Date.now() + (options.timeoutMs ?? 10_000);
  while (!existsSync(options.socket)) {
    if (swtpm.hasExited()) {
      const exit = await swtpm.exited;
      throw new Error(`swtpm ${describeExit(exit)} before its socket appeared: ${swtpm.stderrTail()}`);
    }
    if (Date.now() > deadline) {
      await swtpm.stop(2_000);
      throw new Error(`swtpm did not create ${options.socket}`);
    }
    await sleep(20);
  }
  return swtpm;
}
