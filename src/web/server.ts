// The web GUI's HTTP server, run by every manager replica: the pages (web/, served as they are),
// the login with OpenID Connect, and the API. Sessions live in Redis, so any replica answers.
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseCookie } from 'cookie';
import express, { type NextFunction, type Request, type Response } from 'express';
import { MemoryStore, rateLimit } from 'express-rate-limit';
import type { Redis } from 'ioredis';
import {
  USAGE_HISTORY_MS,
  USAGE_SAMPLE_SECONDS,
  usageHistoryKey,
  parseUsageHistory,
} from '../api/vm-usage-history.js';
import { vmKey } from '../reconcilers/virtual-machine/naming.js';
import { usagePoints } from './vm-details.js';
import type { KubeConfig } from '@kubernetes/client-node';
import type { KubeClients } from '../kube/clients.js';
import type { ObjectCache } from '../kube/object-cache.js';
import type { ChangeListener } from '../operator/watch-edge.js';
import type { PoolLock } from '../pools/pool-lock.js';
import type { EventRecorder } from '../reconcilers/events.js';
import type { Logger } from '../util/logger.js';
import { createAccess } from './access.js';
import { apiRouter } from './api/index.js';
import { TICKET_COOKIE, consoles, refuseUpgrade } from './consoles.js';
import { fixedSpiceTicket } from './spice-ticket-fix.js';
import { liveViews } from './live.js';
import { LoginError, oidcLogin, type OidcLogin } from './oidc.js';
import { WebOptions, servesPlainHttp, type WebSettings } from './options.js';
import { LOGIN_SECONDS } from './sealed-login.js';
import { rbacCheck } from './rbac.js';
import { sessionStore } from './sessions.js';
import { usageHistory } from './usage.js';

export const SESSION_COOKIE = 'vmop_session';
const LOGIN_COOKIE = 'vmop_login';
const PAGES_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '../../web');
const require = createRequire(import.meta.url);
/** The front end's libraries, from node_modules (named in the page's import map). */
const VENDOR: Record<string, string> = {
  'preact.mjs': require.resolve('preact'),
  'hooks.mjs': require.resolve('preact/hooks'),
  'htm.mjs': join(dirname(require.resolve('htm')), 'htm.mjs'),
  'xterm.mjs': join(dirname(require.resolve('@xterm/xterm')), 'xterm.mjs'),
  'xterm.css': join(dirname(require.resolve('@xterm/xterm')), '../css/xterm.css'),
  'uplot.mjs': join(dirname(require.resolve('uplot')), 'uPlot.esm.js'),
  'uplot.css': join(dirname(require.resolve('uplot')), 'uPlot.min.css'),
};
/** spice-html5 (LGPL-3.0-or-later), its ES modules as they are. */
const SPICE_DIR = join(dirname(require.resolve('@spice-project/spice-html5/package.json')), 'src');
export { SPICE_DIR };
/** noVNC (MPL-2.0): its ES modules (core) and what they import (vendor), as they are. */
const NOVNC_DIR = dirname(dirname(require.resolve('@novnc/novnc')));
/** @noble/hashes (MIT): the Images page's SHA-256 of a file to upload, in pieces (ES modules, as they are). */
const NOBLE_HASHES_DIR = dirname(require.resolve('@noble/hashes/sha2.js'));

export interface WebServerDeps {
  options: WebOptions;
  kubeConfig: KubeConfig;
  clients: KubeClients;
  cache: ObjectCache;
  subscribe: (listener: ChangeListener) => () => void;
  redis: Redis;
  lock: PoolLock;
  recordEvent: EventRecorder;
  logger: Logger;
}

export interface WebServer {
  port: number;
  close(): Promise<void>;
}

export async function startWebServer(deps: WebServerDeps): Promise<WebServer> {
  const settings: WebSettings = WebOptions.parse(deps.options);
  const { logger } = deps;
  const publicUrl = new URL(settings.publicUrl);
  const sessions = sessionStore(deps.redis, {
    idleSeconds: settings.sessionIdleSeconds,
    maxSeconds: settings.sessionMaxSeconds,
  });
  const access = createAccess(
    deps.cache,
    rbacCheck(deps.kubeConfig, {
      user: settings.kubernetesUserPrefix,
      group: settings.kubernetesGroupPrefix,
    }),
  );
  const live = liveViews(access, deps.subscribe);
  const usage = usageHistory(deps.redis, deps.cache, settings.usageSampleSeconds, logger);
  usage.start();
  const webConsoles = consoles({
    kubeConfig: deps.kubeConfig,
    clients: deps.clients,
    redis: deps.redis,
    sessionsAlive: (digests) => sessions.aliveByDigest(digests),
    may: async (person, namespace, name, action) => {
      const vm = access.vm(namespace, name);
      return vm !== undefined && (await access.mayOnVm(person, vm, action));
    },
    logger,
  });
  // The provider is asked for its metadata on the first login, and again after a failure.
  let login: Promise<OidcLogin> | undefined;
  const oidc = () => {
    login ??= oidcLogin(settings).catch((err: unknown) => {
      login = undefined;
      throw err;
    });
    return login;
  };
  const cookieOptions = {
    httpOnly: true,
    // Browsers keep Secure cookies of http://localhost too; plain http elsewhere only when allowed.
    secure: !servesPlainHttp(settings),
    sameSite: 'lax' as const,
  };
  if (!cookieOptions.secure)
    logger.warn(
      { publicUrl: settings.publicUrl },
      'the web GUI serves plain http (allowPlainHttp): its cookies travel unencrypted',
    );
  const page = readFileSync(join(PAGES_DIR, 'index.html'), 'utf8');
  const importMap = /<script type="importmap">([\s\S]*?)<\/script>/.exec(page)?.[1] ?? '';
  const csp = [
    "default-src 'self'",
    `script-src 'self' 'sha256-${createHash('sha256').update(importMap).digest('base64')}'`,
    // xterm.js, spice-html5 and noVNC style what they draw with inline styles of their own.
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "frame-ancestors 'none'",
    "base-uri 'none'",
    "form-action 'self'",
  ].join('; ');

  const app = express();
  app.disable('x-powered-by');
  // Only the proxies the admin named: their X-Forwarded-For names the client (req.ip), anyone else's
  // is ignored, so nobody picks the address the limits below count against.
  app.set('trust proxy', settings.trustedProxies.length > 0 ? settings.trustedProxies : false);
  app.use((_req, res, next) => {
    res.set({
      'Content-Security-Policy': csp,
      'X-Content-Type-Options': 'nosniff',
      'Referrer-Policy': 'no-referrer',
      'Cache-Control': 'no-store',
    });
    next();
  });
  const cookies = (req: Request) => parseCookie(req.headers.cookie ?? '');

  // What anyone may call without a login: limited per client address (per replica, in memory), the
  // connection's peer or, behind a trusted proxy, the address it forwards for: a flood from one
  // client costs that client, not everyone behind the same Ingress.
  app.use(
    '/auth/',
    rateLimit({
      windowMs: 60_000,
      limit: settings.loginsPerMinute,
      standardHeaders: 'draft-8',
      legacyHeaders: false,
      // An X-Forwarded-For from a peer that is no trusted proxy is expected, and ignored.
      validate: { xForwardedForHeader: false },
      message: { message: 'too many login requests from your address; try again in a minute' },
    }),
  );
  const personLogins = new MemoryStore();
  personLogins.init({ windowMs: 60_000 } as Parameters<MemoryStore['init']>[0]);

  app.get('/auth/login', async (req, res) => {
    const asked = typeof req.query.returnTo === 'string' ? req.query.returnTo : '/';
    // Only a path of this site: never an open redirect.
    const returnTo =
      asked.startsWith('/') && !asked.startsWith('//') && !asked.startsWith('/\\') ? asked : '/';
    const { url, cookie } = await (await oidc()).begin(returnTo);
    res.cookie(LOGIN_COOKIE, cookie, { ...cookieOptions, path: '/auth/', maxAge: LOGIN_SECONDS * 1000 });
    res.redirect(303, url.href);
  });

  app.get('/auth/callback', async (req, res) => {
    const bound = cookies(req)[LOGIN_COOKIE] ?? '';
    res.clearCookie(LOGIN_COOKIE, { ...cookieOptions, path: '/auth/' });
    try {
      const { person, returnTo } = await (await oidc()).finish(new URL(req.originalUrl, publicUrl), bound);
      if ((await personLogins.increment(person.user)).totalHits > settings.loginsPerPersonPerMinute) {
        logger.warn({ user: person.user }, 'a person logged in too often: no session');
        return void res.status(429).type('text').send('too many logins as you in a minute; try again later');
      }
      const session = await sessions.create(person);
      res.cookie(SESSION_COOKIE, session.id, {
        ...cookieOptions,
        path: '/',
        maxAge: settings.sessionMaxSeconds * 1000,
      });
      logger.info({ user: person.user, groups: person.groups }, 'logged in to the web GUI');
      res.redirect(303, returnTo);
    } catch (err) {
      const message = err instanceof LoginError ? err.message : 'the login failed; log in again';
      logger.warn({ err: (err as Error).message }, 'a web GUI login failed');
      res.status(400).type('text').send(`${message} (/auth/login)`);
    }
  });

  /** The login of the request; for changes, also its CSRF token and origin. */
  const requireSession = async (req: Request, res: Response, next: NextFunction) => {
    const id = cookies(req)[SESSION_COOKIE];
    const session = id ? await sessions.read(id) : undefined;
    if (!session) return void res.status(401).json({ message: 'not logged in' });
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      const origin = req.headers.origin;
      if (
        (origin && origin !== publicUrl.origin) ||
        !sameToken(String(req.headers['x-csrf-token'] ?? ''), session.csrf)
      )
        return void res.status(403).json({ message: 'the request lacks the CSRF token of this login' });
    }
    res.locals.session = session;
    next();
  };

  app.post('/auth/logout', requireSession, async (_req, res) => {
    const { id, person } = res.locals.session as { id: string; person: { user: string } };
    await sessions.delete(id);
    res.clearCookie(SESSION_COOKIE, { ...cookieOptions, path: '/' });
    logger.info({ user: person.user }, 'logged out of the web GUI');
    res.status(204).end();
  });

  app.use(
    '/api',
    express.json({ limit: '16kb' }),
    requireSession,
    apiRouter({
      clients: deps.clients,
      kubeConfig: deps.kubeConfig,
      access,
      live,
      lock: deps.lock,
      recordEvent: deps.recordEvent,
      consoles: webConsoles,
      cookieOptions,
      usage,
      vmUsage: async (namespace, name) => {
        const since = Date.now() - USAGE_HISTORY_MS;
        const history = parseUsageHistory(await deps.redis.get(usageHistoryKey(vmKey(namespace, name))));
        return usagePoints(
          history.filter((sample) => sample.t >= since),
          USAGE_SAMPLE_SECONDS,
        );
      },
      sessionAlive: async (id) => (await sessions.read(id)) !== undefined,
      namespaces: namespaceNames(deps.clients),
    }),
  );
  app.get('/vendor/:file', (req, res) => {
    const file = VENDOR[req.params.file];
    if (!file) return void res.status(404).end();
    res.type(file.endsWith('.css') ? 'text/css' : 'text/javascript').sendFile(file);
  });
  const spiceTicket = fixedSpiceTicket(readFileSync(join(SPICE_DIR, 'ticket.js'), 'utf8'));
  app.get('/vendor/spice/ticket.js', (_req, res) => void res.type('text/javascript').send(spiceTicket));
  app.use('/vendor/spice', express.static(SPICE_DIR, { index: false }));
  for (const part of ['core', 'vendor'])
    app.use(`/vendor/novnc/${part}`, express.static(join(NOVNC_DIR, part), { index: false }));
  app.use('/vendor/noble-hashes', express.static(NOBLE_HASHES_DIR, { index: false, extensions: ['js'] }));
  app.get(
    ['/', '/admin', '/nodes', '/images', '/new', '/console/:namespace/:name', '/vm/:namespace/:name'],
    (_req, res) => void res.type('html').send(page),
  );
  app.use(express.static(PAGES_DIR, { index: false }));
  app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    logger.error({ err: (err as Error).message }, 'a web GUI request failed');
    if (!res.headersSent) res.status(500).json({ message: 'the request failed; see the manager log' });
  });

  const server: Server = await new Promise((resolveListen, reject) => {
    const listening = app.listen(settings.port, settings.host, (err?: Error) =>
      err ? reject(err) : resolveListen(listening),
    );
  });
  // Console WebSockets: same origin only (a browser sends cookies to WebSockets of any page).
  server.on('upgrade', (request, socket, head) => {
    const refuse = () => refuseUpgrade(socket);
    if (request.headers.origin !== publicUrl.origin) return refuse();
    const sent = parseCookie(request.headers.cookie ?? '');
    const id = sent[SESSION_COOKIE];
    void (id ? sessions.read(id) : Promise.resolve(undefined))
      .then((session) =>
        webConsoles.upgrade(request, socket, head, { session, ticketId: sent[TICKET_COOKIE] }),
      )
      .catch((err: unknown) => {
        logger.warn({ err: (err as Error).message }, 'a console upgrade failed');
        refuse();
      });
  });
  const port = (server.address() as AddressInfo).port;
  logger.info({ port, publicUrl: settings.publicUrl }, 'web GUI listening');
  return {
    port,
    async close() {
      live.stop();
      usage.stop();
      personLogins.shutdown();
      webConsoles.close();
      server.closeAllConnections();
      await new Promise<void>((done) => server.close(() => done()));
    },
  };
}

function sameToken(given: string, expected: string): boolean {
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && a.length > 0 && timingSafeEqual(a, b);
}

/** The cluster's namespaces, listed at most every 10 s (each page load asks, through /api/me). */
function namespaceNames(clients: KubeClients): () => Promise<string[]> {
  let listed: { names: Promise<string[]>; at: number } | undefined;
  return () => {
    if (!listed || Date.now() - listed.at > 10_000) {
      const names = clients.core
        .listNamespace()
        .then((list) => list.items.map((namespace) => namespace.metadata!.name!).sort());
      listed = { names, at: Date.now() };
      names.catch(() => (listed = undefined));
    }
    return listed.names;
  };
}
