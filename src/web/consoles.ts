// The consoles in the page: the SPICE display (spice-html5 speaks SPICE over WebSockets, one per
// channel) and the serial console (a terminal), bridged by the GUI to the VM's runner pod through
// the Kubernetes API (port-forward, exec) after checking the person may. A console is opened with
// a ticket that lives TICKET_SECONDS and only for the login that asked for it, carried by an
// HttpOnly cookie scoped to that console's WebSocket path (never in a URL or the page's reach),
// and SPICE with a one-time display password that expires as fast.
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { PassThrough, Writable } from 'node:stream';
import { Exec, PortForward, type KubeConfig } from '@kubernetes/client-node';
import type { Redis } from 'ioredis';
import { WebSocketServer, type WebSocket } from 'ws';
import { z } from 'zod';
import { displaySecretOf, setOneTimePassword } from '../console/one-time-password.js';
import { SERIAL_RELAY_COMMAND, runnerPodOf } from '../console/runner-pod.js';
import type { VirtualMachine } from '../api/virtual-machine.js';
import type { KubeClients } from '../kube/clients.js';
import type { Logger } from '../util/logger.js';
import { digest, randomToken } from './sessions.js';

export const TICKET_SECONDS = 30;
export const TICKET_COOKIE = 'vmop_console';
/** The WebSocket path of a VM's console; its ticket cookie is scoped to it. */
export const consolePath = (kind: 'spice' | 'serial', namespace: string, vm: string) =>
  `/api/console/${kind}/${encodeURIComponent(namespace)}/${encodeURIComponent(vm)}`;

/** Answers a WebSocket upgrade with 403 and closes the connection. */
export const refuseUpgrade = (socket: Duplex) =>
  void socket.end('HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
const Ticket = z.object({
  session: z.string(),
  kind: z.enum(['spice', 'serial']),
  namespace: z.string(),
  vm: z.string(),
  pod: z.string(),
  port: z.number().int().optional(),
  user: z.string(),
});
type Ticket = z.infer<typeof Ticket>;
const ticketKey = (ticket: string) => `vmop:web:console:${digest(ticket)}`;
/** Whose ticket last opened a VM's display: QEMU lets one client in, and drops the one before. */
const displayHolderKey = (namespace: string, vm: string) => `vmop:web:display-holder:${namespace}/${vm}`;
/** The close code (application range; web/console.js knows it) of a display another ticket took over. */
const TAKEN_OVER = { code: 4001, reason: 'another console session took the display over' };

export interface ConsoleDeps {
  kubeConfig: KubeConfig;
  clients: KubeClients;
  redis: Redis;
  logger: Logger;
}

export function consoles(deps: ConsoleDeps) {
  const { redis, logger } = deps;
  const sockets = new WebSocketServer({
    noServer: true,
    // spice-html5 asks for the subprotocol "binary" (websockify's).
    handleProtocols: (protocols) => (protocols.has('binary') ? 'binary' : false),
  });

  async function issue(ticket: Ticket): Promise<string> {
    const id = randomToken();
    await redis.set(ticketKey(id), JSON.stringify(ticket), 'EX', TICKET_SECONDS);
    return id;
  }

  /**
   * The ticket, if it is this login's and for this console; a serial one only once (SPICE opens
   * one socket per channel).
   */
  async function redeem(id: string, sessionId: string, path: string): Promise<Ticket | undefined> {
    const key = ticketKey(id);
    const text = await redis.get(key);
    const ticket = text === null ? undefined : Ticket.safeParse(JSON.parse(text)).data;
    if (!ticket || ticket.session !== digest(sessionId)) return undefined;
    if (consolePath(ticket.kind, ticket.namespace, ticket.vm) !== path) return undefined;
    // Of two uses at once, one deletes it.
    if (ticket.kind === 'serial' && (await redis.del(key)) !== 1) return undefined;
    return ticket;
  }

  return {
    /** A SPICE ticket and a one-time password for the VM's display; the message when there is none. */
    async openSpice(sessionId: string, user: string, vm: VirtualMachine) {
      const spice = vm.spec.vm.display.spice;
      if (!spice) return { message: `${vm.metadata.name} has no SPICE display` };
      if (!vm.status?.runnerPod || vm.status.phase !== 'Running')
        return { message: `${vm.metadata.name} does not run` };
      const namespace = vm.metadata.namespace!;
      const secret = await displaySecretOf(deps.clients.core, namespace, vm.metadata.name);
      const password = secret
        ? await setOneTimePassword(
            {
              core: deps.clients.core,
              customObjects: deps.clients.customObjects,
              namespace,
              vm,
              validitySeconds: TICKET_SECONDS,
              timeoutMs: 15_000,
            },
            secret,
          )
        : undefined;
      const ticket = await issue({
        session: digest(sessionId),
        kind: 'spice',
        namespace,
        vm: vm.metadata.name,
        pod: runnerPodOf(vm),
        port: spice.port,
        user,
      });
      await redis.set(displayHolderKey(namespace, vm.metadata.name), digest(ticket), 'EX', 24 * 3600);
      logger.info({ user, vm: `${namespace}/${vm.metadata.name}` }, 'SPICE console opened in the web GUI');
      return { ticket, ...(password !== undefined && { password }) };
    },

    async openSerial(sessionId: string, user: string, vm: VirtualMachine) {
      if (!vm.status?.runnerPod) return { message: `${vm.metadata.name} does not run` };
      const namespace = vm.metadata.namespace!;
      const ticket = await issue({
        session: digest(sessionId),
        kind: 'serial',
        namespace,
        vm: vm.metadata.name,
        pod: runnerPodOf(vm),
        user,
      });
      logger.info({ user, vm: `${namespace}/${vm.metadata.name}` }, 'serial console opened in the web GUI');
      return { ticket };
    },

    /**
     * An HTTP upgrade to a console's path (consolePath) with its ticket cookie: bridged when the
     * ticket is this login's (`sessionId`, from the session cookie) and for this console.
     */
    async upgrade(
      request: IncomingMessage,
      socket: Duplex,
      head: Buffer,
      cookies: { sessionId?: string; ticketId?: string },
    ) {
      const path = new URL(request.url ?? '/', 'http://localhost').pathname;
      const { sessionId, ticketId } = cookies;
      const ticket = sessionId && ticketId ? await redeem(ticketId, sessionId, path) : undefined;
      if (!ticket) return refuseUpgrade(socket);
      const ticketDigest = digest(ticketId!);
      sockets.handleUpgrade(request, socket, head, (browser) => {
        const bridge = ticket.kind === 'spice' ? bridgeSpice : bridgeSerial;
        bridge(browser, ticket, ticketDigest).catch((err: unknown) => {
          logger.warn({ err: (err as Error).message, vm: ticket.vm }, 'a web console ended with an error');
          browser.close(1011, 'the console could not be reached');
        });
      });
    },

    close: () => sockets.close(),
  };

  /** The browser's socket as a byte stream both ways. */
  function streamsOf(browser: WebSocket) {
    const fromBrowser = new PassThrough();
    browser.on('message', (data: Buffer) => fromBrowser.write(data));
    browser.on('close', () => fromBrowser.end());
    const toBrowser = new Writable({
      write(chunk: Buffer, _encoding, done) {
        if (browser.readyState === browser.OPEN) browser.send(chunk, done);
        else done();
      },
    });
    return { fromBrowser, toBrowser };
  }

  async function bridgeSpice(browser: WebSocket, ticket: Ticket, ticketDigest: string) {
    const { fromBrowser, toBrowser } = streamsOf(browser);
    const forward = await new PortForward(deps.kubeConfig).portForward(
      ticket.namespace,
      ticket.pod,
      [ticket.port!],
      toBrowser,
      null,
      fromBrowser,
    );
    const upstream = forward as WebSocket;
    upstream.on('close', (code, reason) => {
      logger.info(
        { vm: ticket.vm, code, reason: String(reason) },
        'a SPICE channel closed at the runner pod',
      );
      // Tell the person why, if a newer ticket took the display (QEMU just drops the connection).
      void redis
        .get(displayHolderKey(ticket.namespace, ticket.vm))
        .catch(() => null)
        .then((holder) =>
          holder && holder !== ticketDigest
            ? browser.close(TAKEN_OVER.code, TAKEN_OVER.reason)
            : browser.close(1000, 'the display closed'),
        );
    });
    browser.on('close', () => upstream.close());
  }

  async function bridgeSerial(browser: WebSocket, ticket: Ticket) {
    const { fromBrowser, toBrowser } = streamsOf(browser);
    const upstream = (await new Exec(deps.kubeConfig).exec(
      ticket.namespace,
      ticket.pod,
      'runner',
      SERIAL_RELAY_COMMAND,
      toBrowser,
      toBrowser,
      fromBrowser,
      true,
    )) as WebSocket;
    upstream.on('close', () => browser.close(1000, 'the console session ended'));
    browser.on('close', () => upstream.close());
  }
}
export type Consoles = ReturnType<typeof consoles>;
