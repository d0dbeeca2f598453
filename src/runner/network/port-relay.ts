// A VM with an address of its own is reached at that address; its guest ports also reach it from
// its runner pod's address, as QEMU's forwarding does on a `user` network, so a Service selecting
// the VM's pods and a port-forward work alike for every VM. The runner relays each TCP connection
// to the guest's address through the pod's tap (the guest sees it come from the tap's gateway).
// UDP is not relayed: a routed guest's UDP ports are reached at its address.
import net from 'node:net';
import type { Logger } from '../../util/logger.js';

export interface PortRelay {
  close(): Promise<void>;
}

function relayTo(address: string, port: number, logger: Logger, open: Set<net.Socket>) {
  return (client: net.Socket) => {
    const guest = net.connect({ host: address, port, allowHalfOpen: true });
    for (const socket of [client, guest]) {
      open.add(socket);
      socket.on('close', () => open.delete(socket));
    }
    const drop = (err?: Error) => {
      if (err) logger.debug({ port, err: String(err) }, 'a relayed connection ended with an error');
      client.destroy();
      guest.destroy();
    };
    client.on('error', drop);
    guest.on('error', drop);
    client.pipe(guest);
    guest.pipe(client);
  };
}

/** Listens on each TCP port on the pod's addresses (`listenOn`) and relays to the same port of `address`. */
export async function startPortRelay(
  address: string,
  ports: readonly number[],
  logger: Logger,
  listenOn = '0.0.0.0',
): Promise<PortRelay> {
  const servers: net.Server[] = [];
  const open = new Set<net.Socket>();
  // Connections still open end with the runner (a server's close waits for them otherwise).
  const close = async () => {
    const closed = servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve())));
    for (const socket of open) socket.destroy();
    await Promise.all(closed);
  };
  try {
    for (const port of ports) {
      const server = net.createServer({ allowHalfOpen: true }, relayTo(address, port, logger, open));
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, listenOn, resolve);
      });
      servers.push(server);
    }
  } catch (err) {
    await close();
    throw err;
  }
  if (ports.length > 0)
    logger.info({ address, ports }, "relaying the guest's TCP ports from the pod's address");
  return { close };
}
