// A TCP proxy in front of a real server, for network faults: while cut, it resets every
// connection at once (the server unreachable, as behind a failed link) and counts the attempts;
// while stalled, open connections carry nothing from the server (a slow or partitioned link).
import net from 'node:net';

export interface TcpProxy {
  port: number;
  /** Resets the open connections and every new one until restore(). */
  cut(): void;
  restore(): void;
  /** Holds back what the server sends on the open connections until resume(). */
  stall(): void;
  resume(): void;
  /** When connections were attempted (and reset) while cut, in ms since the epoch. */
  refusedAt: number[];
  close(): Promise<void>;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  let cut = false;
  const refusedAt: number[] = [];
  const open = new Set<net.Socket>();
  let stalled = false;
  const held: Array<[net.Socket, Buffer]> = [];
  const server = net.createServer((client) => {
    if (cut) {
      refusedAt.push(Date.now());
      client.resetAndDestroy();
      return;
    }
    const upstream = net.connect(target.port, target.host);
    for (const socket of [client, upstream]) {
      open.add(socket);
      socket.on('close', () => open.delete(socket));
      socket.on('error', () => undefined); // a reset of one side ends the other below
    }
    client.pipe(upstream);
    upstream.on('data', (data: Buffer) => {
      if (stalled) held.push([client, data]);
      else client.write(data);
    });
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    cut() {
      cut = true;
      for (const socket of open) socket.resetAndDestroy();
    },
    restore() {
      cut = false;
    },
    stall() {
      stalled = true;
    },
    resume() {
      stalled = false;
      for (const [client, data] of held.splice(0)) if (!client.destroyed) client.write(data);
    },
    refusedAt,
    close: () =>
      new Promise((resolve) => {
        for (const socket of open) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
