// A tenant's flood of her runner credential's one writable key: SETs through `redis-cli --pipe`
// (RESP on its stdin), a process of its own, as fast as Redis takes them, batch after batch until
// stopped (issue 53's attack: 200,000 writes in 1.8 s). A batch Redis refuses (her user turned
// off, her connection dropped) is tried again after a short pause, as a script would.
import { spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';

export interface SetFlood {
  /** Stops after the batch under way: writes in batches Redis took whole, batches refused, how long. */
  stop(): Promise<{ writes: number; refused: number; ms: number }>;
}

const RETRY_MS = 100;

const resp = (args: string[]) =>
  `*${args.length}\r\n${args.map((arg) => `$${Buffer.byteLength(arg)}\r\n${arg}\r\n`).join('')}`;

/** One batch (`commands`, RESP): whether Redis took them all. */
function floodOnce(redisUrl: string, commands: Buffer): Promise<boolean> {
  const child = spawn('redis-cli', ['-u', redisUrl, '--no-auth-warning', '--pipe'], {
    stdio: ['pipe', 'ignore', 'ignore'],
  });
  child.stdin.on('error', () => undefined); // Redis dropped the connection mid-way
  child.stdin.end(commands);
  return new Promise((resolve) => child.on('exit', (code) => resolve(code === 0)));
}

export function startSetFlood(redisUrl: string, key: string, batch = 200_000): SetFlood {
  let flooding = true;
  let writes = 0;
  let refused = 0;
  const begin = performance.now();
  // Made once: the flooder's own work stays out of what the machine's other processes get.
  const commands = Buffer.from(resp(['SET', key, '{}']).repeat(batch));
  const done = (async () => {
    while (flooding) {
      if (await floodOnce(redisUrl, commands)) writes += batch;
      else {
        refused++;
        await sleep(RETRY_MS);
      }
    }
  })();
  return {
    async stop() {
      flooding = false;
      await done;
      return { writes, refused, ms: performance.now() - begin };
    },
  };
}
