// Clients of a master found through Sentinels move to a promoted replica as soon as the Sentinels
// announce it (+switch-master). A master that hangs or is cut off keeps its clients' connections
// open without an error, so without this they wait on it until it dies (or for TCP's timeout).
//
// ioredis has its own `failoverDetector` for this, but it ends a client for good when the
// announcement comes while the client is reconnecting ("Connection is closed", status end; seen
// here with runners during a failover). This watch instead drops the connections that go to the
// old master, which ioredis handles like any lost connection: it asks the Sentinels again and
// resends what was unanswered. Each Sentinel announces it when it learns it: a client that asked
// one that did not know yet, and went back to the old master, is dropped again at the next.
import { lookup } from 'node:dns/promises';
import { isIP, type Socket } from 'node:net';
import { Redis } from 'ioredis';

export interface SentinelPlace {
  sentinels: Array<{ host: string; port: number }>;
  name: string;
  sentinelPassword?: string;
}

interface Watch {
  clients: Set<Redis>;
  subscribers: Redis[];
}

const SWITCH_MASTER = '+switch-master';
/** One watch per set of Sentinels and master name in this process, shared by all its clients. */
const watches = new Map<string, Watch>();

/** Moves `client` to a new master when the Sentinels of `place` announce one, until it ends. */
export function followFailovers(client: Redis, place: SentinelPlace): void {
  const id = JSON.stringify([place.sentinels, place.name]);
  let watch = watches.get(id);
  if (!watch) {
    watch = {
      clients: new Set(),
      subscribers: place.sentinels.map((sentinel) => subscribe(sentinel, place)),
    };
    watches.set(id, watch);
  }
  const { clients } = watch;
  clients.add(client);
  client.once('end', () => {
    clients.delete(client);
    // The last client gone, nothing here needs the Sentinels: their connections must not keep the
    // process alive.
    if (clients.size === 0 && watches.get(id)?.clients === clients) {
      watches.delete(id);
      for (const subscriber of watch!.subscribers) subscriber.disconnect();
    }
  });
}

/** Sentinels name a master by address or (announce-hostnames) by name; a socket knows the address. */
async function addressOf(host: string): Promise<string | undefined> {
  if (isIP(host)) return host;
  return lookup(host).then(
    (found) => found.address,
    () => undefined,
  );
}

const plainIp = (address: string | undefined) => address?.replace(/^::ffff:/, '');

function subscribe(sentinel: { host: string; port: number }, place: SentinelPlace): Redis {
  const subscriber = new Redis({
    host: sentinel.host,
    port: sentinel.port,
    ...(place.sentinelPassword !== undefined && { password: place.sentinelPassword }),
    // A Sentinel that is down is retried, as the clients retry Redis.
    retryStrategy: (times) => Math.min(times * 200, 5_000),
    maxRetriesPerRequest: null,
  });
  // Its connection problems are the set's, which the clients report themselves.
  subscriber.on('error', () => undefined);
  void subscriber.subscribe(SWITCH_MASTER).catch(() => undefined);
  subscriber.on('message', (channel: string, message: string) => {
    // "<master name> <old host> <old port> <new host> <new port>"
    const [name, oldHost, oldPort] = message.split(' ');
    if (channel !== SWITCH_MASTER || name !== place.name || !oldHost) return;
    void addressOf(oldHost).then((oldAddress) => {
      const watch = watches.get(JSON.stringify([place.sentinels, place.name]));
      for (const client of watch?.clients ?? []) {
        // Connected (or connecting) to the old master: a client elsewhere has moved already, or
        // is asking the Sentinels, which name the new one.
        const stream = client.stream as Socket | undefined;
        if (stream?.remotePort === Number(oldPort) && plainIp(stream.remoteAddress) === oldAddress)
          stream.destroy();
      }
    });
  });
  return subscriber;
}
