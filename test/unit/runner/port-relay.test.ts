// The runner's relay of a routed guest's TCP ports, on real sockets: an echo server at 127.0.0.2
// stands for the guest at its own address, the relay listens on the same port at 127.0.0.1 (the
// pod's address).
import net from 'node:net';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { startPortRelay, type PortRelay } from '../../../src/runner/network/port-relay.js';
import { freePort } from '../../../src/util/free-port.js';

const GUEST = '127.0.0.2';
const logger = pino({ level: 'silent' });

/** An echo server on the guest's address that answers what it read once the client half-closed. */
async function startGuest(port: number): Promise<net.Server> {
  const server = net.createServer({ allowHalfOpen: true }, (socket) => {
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('end', () => socket.end(`echo:${Buffer.concat(chunks).toString()}`));
  });
  await new Promise<void>((resolve) => server.listen(port, GUEST, resolve));
  return server;
}

/** Sends `text`, half-closes, and resolves with all that came back. */
function exchange(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true }, () => socket.end(text));
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('end', () => resolve(Buffer.concat(chunks).toString()));
    socket.on('error', reject);
  });
}

describe("the runner's relay of a routed guest's TCP ports", () => {
  let relay: PortRelay | undefined;
  let guest: net.Server | undefined;
  afterEach(async () => {
    await relay?.close();
    guest?.close();
  });

  it("reaches the guest's port from the pod's, both directions, half-close included", async () => {
    const port = await freePort();
    guest = await startGuest(port);
    relay = await startPortRelay(GUEST, [port], logger, '127.0.0.1');
    const big = 'x'.repeat(1 << 20);
    expect(await exchange(port, 'hello')).toBe('echo:hello');
    expect(await exchange(port, big)).toBe(`echo:${big}`);
  });

  it('closes a connection at once when the guest does not listen', async () => {
    const port = await freePort();
    relay = await startPortRelay(GUEST, [port], logger, '127.0.0.1');
    await expect(exchange(port, 'hello')).resolves.toBe('');
  });

  it('ends with the connections still open (the runner does not wait for clients)', async () => {
    const port = await freePort();
    guest = net.createServer(() => undefined); // accepts and never answers
    await new Promise<void>((resolve) => guest!.listen(port, GUEST, resolve));
    relay = await startPortRelay(GUEST, [port], logger, '127.0.0.1');
    const client = net.connect(port, '127.0.0.1');
    const closed = new Promise((resolve) => client.on('close', resolve));
    client.on('error', () => undefined);
    await new Promise((resolve) => client.on('connect', resolve));
    await relay.close();
    relay = undefined;
    await closed;
  });

  it('refuses to start on a port it cannot bind, and leaves none bound', async () => {
    const [taken, free] = [await freePort(), await freePort()];
    const holder = net.createServer();
    await new Promise<void>((resolve) => holder.listen(taken, '127.0.0.1', resolve));
    await expect(startPortRelay(GUEST, [free, taken], logger, '127.0.0.1')).rejects.toThrow(/EADDRINUSE/);
    holder.close();
    // The first port was let go again.
    const again = await startPortRelay(GUEST, [free], logger, '127.0.0.1');
    await again.close();
  });
});
