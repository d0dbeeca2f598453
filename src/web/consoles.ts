// The consoles in the page: the displays (spice-html5 speaks SPICE over WebSockets, one per
// channel; noVNC speaks VNC over one) and the serial console (a terminal), bridged by the GUI to
// the VM's runner pod through the Kubernetes API (port-forward, exec) after checking the person
// may. A console is opened with a ticket that lives TICKET_SECONDS and only for the login that
// asked for it, carried by an HttpOnly cookie scoped to that console's WebSocket path (never in a
// URL or the page's reach), and a display with a one-time password that expires as fast. An open console ends with the
// login (checked every SESSION_CHECK_MS) and with the person's permission (PERMISSION_CHECK_MS),
// and one in use by another person is taken over only with takeConsole (VM-Operator's rule).
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { PassThrough, Writable } from 'node:stream';
import { Exec, PortForward, type KubeConfig } from '@kubernetes/client-node';
import type { Redis } from 'ioredis';
import { WebSocketServer, type WebSocket } from 'ws';
import { z } from 'zod';
import { displaySecretOf, setOneTimePassword } from '../console/one-time-password.js';
import { SERIAL_RELAY_COMMAND, runnerPodOf } from '../console/runner-pod.js';
import { answerRelay } from '../console/relay-go.js';
import type { VirtualMachine } from '../api/virtual-machine.js';
import type { KubeClients } from '../kube/clients.js';
import type { Logger } from '../util/logger.js';
import type { Person } from './sessions.js';
import { digest, randomToken } from './sessions.js';

export const TICKET_SECONDS = 30;
/** How often open consoles look for their login (logout, expiry): one Redis round trip for all. */
export const SESSION_CHECK_MS = 2_000;
/** How often open consoles ask again whether their person may still use them (RBAC answers are kept 10 s). */
export const PERMISSION_CHECK_MS = 10_000;
/** How long a console counts as in use after its holder last confirmed it. */
const HOLDER_SECONDS = 30;
export const TICKET_COOKIE = 'vmop_console';
/** The WebSocket path of a VM's console; its ticket cookie is scoped to it. */
export const CONSOLE_KINDS = ['spice', 'vnc', 'serial'] as const;
export type ConsoleKind = (typeof CONSOLE_KINDS)[number];
export const consolePath = (kind: ConsoleKind, namespace: string, vm: string) =>
  `/api/console/${kind}/${encodeURIComponent(namespace)}/${encodeURIComponent(vm)}`;

/** Answers a WebSocket upgrade with 403 and closes the connection. */
export const refuseUpgrade = (socket: Duplex) =>
  void socket.end('HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
const Ticket = z.object({
  session: z.string(),
  kind: z.enum(CONSOLE_KINDS),
  namespace: z.string(),
  vm: z.string(),
  pod: z.string(),
  port: z.number().int().optional(),
  user: z.string(),
});
type Ticket = z.infer<typeof Ticket>;
const ticketKey = (ticket: string) => `vmop:web:console:${digest(ticket)}`;
/**
 * Who uses a VM's console (its user and ticket's digest): QEMU lets one display client in and drops
 * the one before, the serial relay likewise. Kept while the console is open, refreshed by its bridges.
 */
const Holder = z.object({ user: z.string(), ticket: z.string() });
type Holder = z.infer<typeof Holder>;
const holderKey = (kind: Ticket['kind'], namespace: string, vm: string) =>
  `vmop:web:console-holder:${kind}:${namespace}/${vm}`;
/** Deletes or refreshes the holder only while it is still this ticket's (another may have taken over). */
const IF_HOLDER = `local v = redis.call('GET', KEYS[1])
if not v or cjson.decode(v).ticket ~= ARGV[1] then return 0 end
if ARGV[2] == 'del' then return redis.call('DEL', KEYS[1]) end
return redis.call('EXPIRE', KEYS[1], ARGV[2])`;
/** Close codes (application range; web/console.js shows their reasons). */
const TAKEN_OVER = { code: 4001, reason: 'another console session took this console over' };
const LOGIN_ENDED = { code: 4002, reason: 'your login ended (logged out or expired)' };
const PERMISSION_LOST = { code: 4003, reason: 'you may no longer use this console' };

export interface ConsoleDeps {
  kubeConfig: KubeConfig;
  clients: KubeClients;
  redis: Redis;
  /** Which of the logins (by their digest) still exist. */
  sessionsAlive: (digests: string[]) => Promise<boolean[]>;
  /** Whether the person may (still) do `action` with the VM; false when it is gone. */
  may: (
    person: Person,
    namespace: string,
    vm: string,
    action: 'accessConsole' | 'takeConsole',
  ) => Promise<boolean>;
  logger: Logger;
}

/** A console bridged by this replica. */
interface OpenConsole {
  ticket: Ticket;
  ticketDigest: string;
  person: Person;
  end(close: { code: number; reason: string }): void;
}

export function consoles(deps: ConsoleDeps) {
  const { redis, logger } = deps;
  const sockets = new WebSocketServer({
    noServer: true,
    // spice-html5 and noVNC ask for the subprotocol "binary" (websockify's).
    handleProtocols: (protocols) => (protocols.has('binary') ? 'binary' : false),
  });
  const open = new Set<OpenConsole>();
  let permissionsCheckedAt = Date.now();
  const checks = setInterval(() => {
    checkOpenConsoles().catch((err: unknown) =>
      logger.warn({ err: (err as Error).message }, 'checking the open web consoles failed'),
    );
  }, SESSION_CHECK_MS);
  checks.unref();

  /**
   * Ends consoles whose login ended or whose person lost the permission; keeps the others held.
   * Once per ticket: a SPICE display is several sockets (one per channel) of one ticket.
   */
  async function checkOpenConsoles() {
    if (open.size === 0) return;
    const byTicket = new Map<string, OpenConsole[]>();
    for (const c of open) byTicket.set(c.ticketDigest, [...(byTicket.get(c.ticketDigest) ?? []), c]);
    const digests = [...new Set([...open].map((c) => c.ticket.session))];
    const alive = new Map((await deps.sessionsAlive(digests)).map((yes, i) => [digests[i]!, yes]));
    const recheck = Date.now() - permissionsCheckedAt >= PERMISSION_CHECK_MS;
    if (recheck) permissionsCheckedAt = Date.now();
    await Promise.all(
      [...byTicket].map(async ([ticketDigest, sockets]) => {
        const { ticket, person } = sockets[0]!;
        const end = (close: { code: number; reason: string }) => sockets.forEach((c) => c.end(close));
        if (!alive.get(ticket.session)) return end(LOGIN_ENDED);
        if (recheck && !(await deps.may(person, ticket.namespace, ticket.vm, 'accessConsole')))
          return end(PERMISSION_LOST);
        await redis.eval(
          IF_HOLDER,
          1,
          holderKey(ticket.kind, ticket.namespace, ticket.vm),
          ticketDigest,
          HOLDER_SECONDS,
        );
      }),
    );
  }

  /** Bridges a console: tracked while it is open, its holder let go when its last socket closes. */
  function track(browser: WebSocket, ticket: Ticket, ticketDigest: string, person: Person) {
    const entry: OpenConsole = {
      ticket,
      ticketDigest,
      person,
      end: (close) => {
        logger.info(
          { user: ticket.user, vm: `${ticket.namespace}/${ticket.vm}`, why: close.reason },
          'a web console was ended',
        );
        browser.close(close.code, close.reason);
      },
    };
    open.add(entry);
    browser.on('close', () => {
      open.delete(entry);
      if ([...open].some((c) => c.ticketDigest === ticketDigest)) return; // another SPICE channel
      void redis
        .eval(IF_HOLDER, 1, holderKey(ticket.kind, ticket.namespace, ticket.vm), ticketDigest, 'del')
        .catch(() => undefined);
    });
  }

  async function readHolder(
    kind: Ticket['kind'],
    namespace: string,
    vm: string,
  ): Promise<Holder | undefined> {
    const text = await redis.get(holderKey(kind, namespace, vm));
    return text === null ? undefined : Holder.safeParse(JSON.parse(text)).data;
  }

  /**
   * Why the person may not open the VM's console now: another person uses it and this one may not
   * take it over (VM-Operator's takeConsole).
   */
  async function inUseByAnother(person: Person, kind: Ticket['kind'], vm: VirtualMachine) {
    const namespace = vm.metadata.namespace!;
    const holder = await readHolder(kind, namespace, vm.metadata.name);
    if (!holder || holder.user === person.user) return undefined;
    if (await deps.may(person, namespace, vm.metadata.name, 'takeConsole')) return undefined;
    const what = { spice: 'SPICE display', vnc: 'VNC display', serial: 'serial console' }[kind];
    return `${holder.user} uses the ${what} of ${vm.metadata.name}; taking it over needs the takeConsole permission`;
  }

  async function issue(ticket: Ticket): Promise<string> {
    const id = randomToken();
    await redis.set(ticketKey(id), JSON.stringify(ticket), 'EX', TICKET_SECONDS);
    return id;
  }

  /**
   * The ticket, if it is this login's and for this console; once, but SPICE's for each socket it
   * opens (one per channel).
   */
  async function redeem(id: string, sessionId: string, path: string): Promise<Ticket | undefined> {
    const key = ticketKey(id);
    const text = await redis.get(key);
    const ticket = text === null ? undefined : Ticket.safeParse(JSON.parse(text)).data;
    if (!ticket || ticket.session !== digest(sessionId)) return undefined;
    if (consolePath(ticket.kind, ticket.namespace, ticket.vm) !== path) return undefined;
    // Of two uses at once, one deletes it.
    if (ticket.kind !== 'spice' && (await redis.del(key)) !== 1) return undefined;
    return ticket;
  }

  return {
    /**
     * A ticket and a one-time password for the VM's SPICE or VNC display; the message when there is
     * none. VNC is always locked: without a display Secret (yet) nobody gets in.
     */
    async openDisplay(sessionId: string, person: Person, vm: VirtualMachine, kind: 'spice' | 'vnc') {
      const display = vm.spec.vm.display[kind];
      if (!display) return { message: `${vm.metadata.name} has no ${kind.toUpperCase()} display` };
      if (!vm.status?.runnerPod || vm.status.phase !== 'Running')
        return { message: `${vm.metadata.name} does not run` };
      const inUse = await inUseByAnother(person, kind, vm);
      if (inUse) return { message: inUse };
      const { user } = person;
      const namespace = vm.metadata.namespace!;
      const secret = await displaySecretOf(deps.clients.core, namespace, vm.metadata.name);
      if (!secret && kind === 'vnc')
        return { message: `${vm.metadata.name}'s display Secret is not made yet: try again in a moment` };
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
        kind,
        namespace,
        vm: vm.metadata.name,
        pod: runnerPodOf(vm),
        port: display.port,
        user,
      });
      logger.info({ user, vm: `${namespace}/${vm.metadata.name}`, kind }, 'a display opened in the web GUI');
      return { ticket, ...(password !== undefined && { password }) };
    },

    async openSerial(sessionId: string, person: Person, vm: VirtualMachine) {
      if (!vm.status?.runnerPod) return { message: `${vm.metadata.name} does not run` };
      const inUse = await inUseByAnother(person, 'serial', vm);
      if (inUse) return { message: inUse };
      const { user } = person;
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
     * ticket is this login's (`session`, from the session cookie) and for this console.
     */
    async upgrade(
      request: IncomingMessage,
      socket: Duplex,
      head: Buffer,
      sent: { session?: { id: string; person: Person }; ticketId?: string },
    ) {
      const path = new URL(request.url ?? '/', 'http://localhost').pathname;
      const { session, ticketId } = sent;
      const ticket = session && ticketId ? await redeem(ticketId, session.id, path) : undefined;
      if (!ticket) return refuseUpgrade(socket);
      const ticketDigest = digest(ticketId!);
      // This ticket holds the console now (a takeover replaces the holder before the bridge opens).
      const holder = JSON.stringify({ user: ticket.user, ticket: ticketDigest } satisfies Holder);
      await redis.set(holderKey(ticket.kind, ticket.namespace, ticket.vm), holder, 'EX', HOLDER_SECONDS);
      sockets.handleUpgrade(request, socket, head, (browser) => {
        track(browser, ticket, ticketDigest, session!.person);
        const bridge = ticket.kind === 'serial' ? bridgeSerial : bridgeDisplay;
        bridge(browser, ticket, ticketDigest).catch((err: unknown) => {
          logger.warn({ err: (err as Error).message, vm: ticket.vm }, 'a web console ended with an error');
          browser.close(1011, 'the console could not be reached');
        });
      });
    },

    close: () => {
      clearInterval(checks);
      sockets.close();
    },
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

  /**
   * Whether the browser's socket has closed, from now on: a bridge opened while it was closing must
   * close too, or it lives on (a serial relay would take the console from the next session).
   */
  function closedLater(browser: WebSocket): () => boolean {
    let closed = false;
    browser.once('close', () => (closed = true));
    // CLOSING: its close frame came, the 'close' event comes once the connection is down.
    return () => closed || browser.readyState !== browser.OPEN;
  }

  /** A display's socket (a SPICE channel's, or VNC's one) to its port in the runner pod. */
  async function bridgeDisplay(browser: WebSocket, ticket: Ticket, ticketDigest: string) {
    const { fromBrowser, toBrowser } = streamsOf(browser);
    const browserClosed = closedLater(browser);
    const forward = await new PortForward(deps.kubeConfig).portForward(
      ticket.namespace,
      ticket.pod,
      [ticket.port!],
      toBrowser,
      null,
      fromBrowser,
    );
    const upstream = forward as WebSocket;
    if (browserClosed()) {
      logger.info(
        { vm: `${ticket.namespace}/${ticket.vm}` },
        'a display closed before its channel was up: ended it',
      );
      return upstream.close();
    }
    upstream.on('close', (code, reason) => {
      logger.info(
        { vm: ticket.vm, kind: ticket.kind, code, reason: String(reason) },
        'a display connection closed at the runner pod',
      );
      // Tell the person why, if a newer ticket took the display (QEMU just drops the connection).
      void readHolder(ticket.kind, ticket.namespace, ticket.vm)
        .catch(() => undefined)
        .then((holder) =>
          holder && holder.ticket !== ticketDigest
            ? browser.close(TAKEN_OVER.code, TAKEN_OVER.reason)
            : browser.close(1000, 'the display closed'),
        );
    });
    browser.on('close', () => upstream.close());
  }

  async function bridgeSerial(browser: WebSocket, ticket: Ticket, ticketDigest: string) {
    const { fromBrowser, toBrowser } = streamsOf(browser);
    const browserClosed = closedLater(browser);
    // The relay may start seconds from now: it takes the console only if this page is still open
    // and no newer session took the console meanwhile.
    const relay = answerRelay({
      keys: fromBrowser,
      errors: toBrowser,
      stillWanted: async () => {
        if (browserClosed()) return false;
        const holder = await readHolder('serial', ticket.namespace, ticket.vm);
        if (holder?.ticket === ticketDigest) return true;
        browser.close(TAKEN_OVER.code, TAKEN_OVER.reason);
        return false;
      },
    });
    const upstream = (await new Exec(deps.kubeConfig).exec(
      ticket.namespace,
      ticket.pod,
      'runner',
      SERIAL_RELAY_COMMAND,
      toBrowser,
      relay.relayErrors,
      relay.toRelay,
      false,
    )) as WebSocket;
    if (browserClosed()) {
      logger.info(
        { vm: `${ticket.namespace}/${ticket.vm}` },
        'a serial console closed before its relay was up: ended it',
      );
      return upstream.close();
    }
    upstream.on('close', () => browser.close(1000, 'the console session ended'));
    browser.on('close', () => upstream.close());
  }
}
export type Consoles = ReturnType<typeof consoles>;
