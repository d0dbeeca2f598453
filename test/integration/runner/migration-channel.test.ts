// The migration side channel (runner/migration/channel.ts) on real TLS sockets: only a peer with
// the VM's key gets it. Another namespace's pod can connect to the listener (the pod network
// reaches it) but, without the key, learns and sends nothing; the one target with the key still
// gets the channel afterwards.
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { once } from 'node:events';
import { describe, expect, it } from 'vitest';
import { connectToSource, listenForTarget, type Psk } from '../../../src/runner/migration/channel.js';

const key = (): Psk => ({ identity: 'vmop', key: randomBytes(32) });

describe('the migration side channel', () => {
  it('admits no peer without the key (another key, plain TCP), then the target with it', async () => {
    const psk = key();
    const listener = await listenForTarget(psk);
    try {
      await expect(connectToSource('127.0.0.1', listener.port, key())).rejects.toThrow();
      await expect(
        connectToSource('127.0.0.1', listener.port, { ...psk, identity: 'other' }),
      ).rejects.toThrow();
      // Plain bytes, as a port scanner or a stranger's client sends them: the server answers no data.
      const plain = net.connect(listener.port, '127.0.0.1');
      await once(plain, 'connect');
      plain.write('{"type":"hello","id":"stranger"}\n');
      const received: Buffer[] = [];
      plain.on('data', (chunk: Buffer) => received.push(chunk));
      await once(plain, 'close');
      expect(Buffer.concat(received).toString()).not.toContain('{');

      const target = await connectToSource('127.0.0.1', listener.port, psk);
      const source = await listener.accepted;
      target.send({ type: 'hello', id: 'target' });
      expect(await source.next()).toEqual({ type: 'hello', id: 'target' });
      target.close();
      source.close();
    } finally {
      listener.close();
    }
  });
});
