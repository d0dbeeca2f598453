// The side channel of a live migration between the source and the target runner: one TLS
// connection authenticated by the migration's pre-shared key (the same key QEMU's own migration
// and block export use), carrying JSON lines. The target asks; the source tells it how its QEMU
// runs now (what changed since its start); the target says where it listens; each tells the other
// how it ended.
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { createInterface } from 'node:readline';
import tls from 'node:tls';
import { z } from 'zod';
import { MachineFingerprint } from './fingerprint.js';

export const ChannelMessage = z.discriminatedUnion('type', [
  z.object({ type: z.literal('hello'), id: z.string() }),
  // What changed at the source since its start, and what its QEMU is: never how to start a
  // process (the target renders its own from its own config and image; anything else sent is dropped).
  z.object({
    type: z.literal('bundle'),
    /** The source's QEMU as it runs (with the CPUs below): the target's must match it. */
    fingerprint: MachineFingerprint,
    /** CPUs the source plugged in after its start: the target adds them before the state arrives. */
    cpus: z.array(z.object({ driver: z.string(), id: z.string(), props: z.record(z.string(), z.number()) })),
    /** CD drives' media as they are now (changed at runtime, so not in the arguments). */
    media: z.record(z.string(), z.string().nullable()),
    /** The block nodes of the disks the source mirrors to the target (not shared). */
    mirror: z.array(z.string()),
    /** The guest had booted (it opened the vmop agent port): no port event tells the target. */
    booted: z.boolean(),
  }),
  z.object({
    type: z.literal('ready'),
    migrationPort: z.number().int(),
    nbdPort: z.number().int().optional(),
    /** Export name of each mirrored disk's block node. */
    exports: z.record(z.string(), z.string()),
    /**
     * Where the source reaches the target's ports: its pod's address (the source may see the
     * channel come from another, e.g. the node's, where pod traffic leaving a node is masqueraded).
     */
    address: z.string().optional(),
  }),
  z.object({
    type: z.literal('ended'),
    result: z.enum(['completed', 'failed']),
    message: z.string().optional(),
  }),
]);
export type ChannelMessage = z.infer<typeof ChannelMessage>;

export interface Psk {
  identity: string;
  key: Buffer;
}

/** A key file as QEMU's tls-creds-psk reads it: `identity:hexkey` lines; the first is ours. */
export async function readPsk(keysFile: string): Promise<Psk> {
  const line = (await readFile(keysFile, 'utf8')).split('\n').find((l) => l.includes(':'));
  if (!line) throw new Error(`${keysFile} holds no identity:key line`);
  const [identity, hex] = line.trim().split(':');
  return { identity: identity!, key: Buffer.from(hex!, 'hex') };
}

/** PSK suites are TLS 1.2's in Node. */
const PSK_TLS = { minVersion: 'TLSv1.2', maxVersion: 'TLSv1.2', ciphers: 'PSK-AES256-GCM-SHA384' } as const;

export interface Channel {
  /** The other runner's address as this one sees it (a pod's, or its node's where pod traffic is masqueraded). */
  remoteAddress: string;
  send(message: ChannelMessage): void;
  /** The next message; rejects when the connection ends or a message is malformed. */
  next(): Promise<ChannelMessage>;
  close(): void;
}

function channelOn(socket: tls.TLSSocket): Channel {
  const queue: ChannelMessage[] = [];
  const waiting: Array<{ resolve: (m: ChannelMessage) => void; reject: (e: Error) => void }> = [];
  let ended: Error | undefined;
  const fail = (err: Error) => {
    ended ??= err;
    for (const waiter of waiting.splice(0)) waiter.reject(ended);
  };
  createInterface({ input: socket }).on('line', (line) => {
    const parsed = ChannelMessage.safeParse(JSON.parse(line));
    if (!parsed.success) return fail(new Error(`a malformed migration message: ${line.slice(0, 200)}`));
    const waiter = waiting.shift();
    if (waiter) waiter.resolve(parsed.data);
    else queue.push(parsed.data);
  });
  socket.on('close', () => fail(new Error('the other runner closed the migration channel')));
  socket.on('error', (err) => fail(err));
  return {
    remoteAddress: (socket.remoteAddress ?? '').replace(/^::ffff:/, ''),
    send: (message) => void socket.write(`${JSON.stringify(message)}\n`),
    next: () => {
      const queued = queue.shift();
      if (queued) return Promise.resolve(queued);
      if (ended) return Promise.reject(ended);
      return new Promise((resolve, reject) => waiting.push({ resolve, reject }));
    },
    close: () => socket.end(),
  };
}

/** The source: listens (any free port) for the one target that knows the key. */
export async function listenForTarget(
  psk: Psk,
): Promise<{ port: number; accepted: Promise<Channel>; close(): void }> {
  let accept: (channel: Channel) => void = () => undefined;
  const accepted = new Promise<Channel>((resolve) => (accept = resolve));
  const server = tls.createServer(
    {
      ...PSK_TLS,
      pskCallback: (_socket, identity) => (identity === psk.identity ? psk.key : null),
    },
    (socket) => {
      server.close(); // one target per migration
      accept(channelOn(socket));
    },
  );
  server.listen(0, '0.0.0.0');
  await once(server, 'listening');
  return { port: (server.address() as AddressInfo).port, accepted, close: () => server.close() };
}

/** The target: connects to the source's side channel. */
export async function connectToSource(host: string, port: number, psk: Psk): Promise<Channel> {
  const socket = tls.connect({
    ...PSK_TLS,
    host,
    port,
    pskCallback: () => ({ psk: psk.key, identity: psk.identity }),
    checkServerIdentity: () => undefined, // PSK: the key is the identity
  });
  await once(socket, 'secureConnect');
  return channelOn(socket);
}
