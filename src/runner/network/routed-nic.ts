// The runner's side of a VM's own address: it waits for the tap vmop's node agent makes in the pod
// (QEMU cannot start without it) and answers the guest's DHCP on it. The runner is unprivileged:
// port 67 is open to it by the pod's sysctl net.ipv4.ip_unprivileged_port_start (a safe sysctl).
import dgram from 'node:dgram';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../../util/logger.js';
import { DhcpMessage, dhcpReply, parseDhcpRequest, type Lease } from './dhcp.js';

const DHCP_SERVER_PORT = 67;
const DHCP_CLIENT_PORT = 68;
/** A lease's time: the guest renews with whichever runner has it then (the same answer). */
const LEASE_SECONDS = 86_400;

/** Waits until the node agent made the tap; says so while it waits. */
export async function waitForTap(
  name: string,
  options: { logger: Logger; timeoutMs: number; stopped: () => boolean; sysfs?: string },
): Promise<void> {
  const device = `${options.sysfs ?? '/sys/class/net'}/${name}`;
  const deadline = Date.now() + options.timeoutMs;
  let said = false;
  while (!existsSync(device)) {
    if (options.stopped()) return;
    if (Date.now() > deadline)
      throw new Error(
        `the tap ${name} for the VM's own address did not appear in ${options.timeoutMs / 1000} s: is vmop's node agent running on this node? (its log says why)`,
      );
    if (!said) options.logger.info({ tap: name }, "waiting for the node agent to make the VM's tap");
    said = true;
    await sleep(200);
  }
}

/** The pod's nameservers (cluster DNS), for the guest. */
export async function podNameservers(resolvConf = '/etc/resolv.conf'): Promise<string[]> {
  const text = await readFile(resolvConf, 'utf8').catch(() => '');
  return [...text.matchAll(/^nameserver\s+(\d+\.\d+\.\d+\.\d+)\s*$/gm)].map((match) => match[1]!);
}

export interface DhcpServer {
  close(): Promise<void>;
}

/** Answers DHCP for one guest: every client on the tap gets `lease` (a pod has one guest). */
export async function startDhcpServer(
  lease: Lease,
  logger: Logger,
  port = DHCP_SERVER_PORT,
): Promise<DhcpServer> {
  const socket = dgram.createSocket({ type: 'udp4', reuseAddr: true });
  socket.on('message', (packet) => {
    const request = parseDhcpRequest(packet);
    if (!request) return;
    const reply = dhcpReply(request, lease);
    if (!reply) return;
    // Unicast to the address: the node agent put the guest's MAC into the pod's neighbour table.
    socket.send(reply, DHCP_CLIENT_PORT, lease.address, (err) => {
      if (err) logger.warn({ err, address: lease.address }, "could not answer the guest's DHCP");
    });
    if (request.message === DhcpMessage.Request)
      logger.info(
        { address: lease.address, mac: request.chaddr.toString('hex') },
        'the guest took its address (DHCP)',
      );
  });
  socket.on('error', (err) => logger.warn({ err }, 'DHCP server error'));
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.bind(port, '0.0.0.0', () => {
      socket.off('error', reject);
      resolve();
    });
  });
  return { close: () => new Promise<void>((resolve) => socket.close(() => resolve())) };
}

export const routedLease = (
  address: string,
  gateway: string,
  dnsServers: string[],
  hostName: string,
): Lease => ({
  address,
  gateway,
  dnsServers,
  leaseSeconds: LEASE_SECONDS,
  hostName,
});
