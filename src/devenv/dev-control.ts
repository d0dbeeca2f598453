// `vmop dev`'s control channel: a Unix socket in its directory through which `vmop dev node …` and
// `vmop dev redis lose` ask the running supervisor to do what only it can (its processes are its
// children, and it would restart what another process killed). One JSON line each way.
import { chmod, rm } from 'node:fs/promises';
import net from 'node:net';
import { createInterface } from 'node:readline';
import { z } from 'zod';
import type { Logger } from '../util/logger.js';

export const DevCommand = z.discriminatedUnion('command', [
  /** The node's kubelet, containerd and kube-proxy stop for good; its pods run on (a node cut off). */
  z.object({ command: z.literal('node-stop'), node: z.string() }),
  /** As a power loss: the node's services stop and its pods' processes die. */
  z.object({ command: z.literal('node-power-off'), node: z.string() }),
  /** The node's services start again. */
  z.object({ command: z.literal('node-start'), node: z.string() }),
  /** Every Redis server (and Sentinel) dies and comes back empty. */
  z.object({ command: z.literal('redis-lose') }),
]);
export type DevCommand = z.infer<typeof DevCommand>;

const Reply = z.union([z.object({ ok: z.literal(true) }), z.object({ error: z.string() })]);

/** Serves commands on `socketPath` (readable by its owner only) until closed. */
export async function serveDevControl(
  socketPath: string,
  handle: (command: DevCommand) => Promise<void>,
  logger: Logger,
): Promise<{ close(): Promise<void> }> {
  await rm(socketPath, { force: true });
  // One at a time: a node stopped while it starts again would leave either half done.
  let queue = Promise.resolve();
  const server = net.createServer((socket) => {
    socket.on('error', () => undefined);
    const lines = createInterface({ input: socket });
    lines.once('line', (line) => {
      lines.close();
      const reply = (body: z.infer<typeof Reply>) => socket.end(`${JSON.stringify(body)}\n`);
      let command: DevCommand;
      try {
        command = DevCommand.parse(JSON.parse(line));
      } catch (err) {
        return reply({ error: `not a command: ${(err as Error).message}` });
      }
      queue = queue.then(async () => {
        logger.info({ command }, 'control command');
        try {
          await handle(command);
          reply({ ok: true });
        } catch (err) {
          logger.warn({ command, err: (err as Error).message }, 'control command failed');
          reply({ error: (err as Error).message });
        }
      });
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, resolve);
  });
  await chmod(socketPath, 0o600);
  return {
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        void rm(socketPath, { force: true });
      }),
  };
}

/** Sends one command to the supervisor listening on `socketPath`; throws with its error. */
export async function sendDevCommand(socketPath: string, command: DevCommand): Promise<void> {
  const socket = net.connect(socketPath);
  try {
    const answer = new Promise<string>((resolve, reject) => {
      createInterface({ input: socket }).once('line', resolve);
      socket.once('error', reject);
      socket.once('close', () =>
        reject(new Error('vmop dev closed the control connection without an answer')),
      );
    });
    socket.write(`${JSON.stringify(command)}\n`);
    const reply = Reply.parse(JSON.parse(await answer));
    if ('error' in reply) throw new Error(reply.error);
  } finally {
    socket.destroy();
  }
}
