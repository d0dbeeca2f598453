// API requests over pooled keep-alive connections, with Node's own https client.
//
// client-node 1.x sends every request through node-fetch with a new https.Agent, so each one opens
// a new TCP + TLS connection (kubernetes-client/javascript#2893; 2.x fixes it but needs Node 22).
// Handing node-fetch 2.7 one keep-alive agent instead is not safe: its check for a cut-off chunked
// body raises a false "Premature close" when a pooled socket has moved on to the next request
// before the previous response's 'close' (node-fetch/node-fetch#1767). In manager pods that made
// lists and discovery fail over and over. This library keeps node-fetch out of the request path;
// watches still use it, each on a connection of its own, which is not affected.
import { createHash } from 'node:crypto';
import https from 'node:https';
import type { IncomingHttpHeaders } from 'node:http';
import {
  ResponseContext,
  wrapHttpLibrary,
  type HttpLibrary,
  type RequestContext,
} from '@kubernetes/client-node';

/** The agent options that make a connection (client-node sets these from the kubeconfig). */
const TLS_OPTIONS = ['ca', 'cert', 'key', 'pfx', 'passphrase', 'rejectUnauthorized', 'servername'] as const;

export interface PooledHttpOptions {
  /** An idle pooled connection is closed after this; below the apiserver's own 90 s idle timeout. */
  idleTimeoutMs?: number;
  /** A request that receives nothing for this long fails; the apiserver ends its own requests at 60 s. */
  silenceTimeoutMs?: number;
  /**
   * Sent with every request. The apiserver names the field manager of a write that gives none by
   * its first word, so vmop's patches show as `vmop` in managedFields (without one: `unknown`).
   */
  userAgent?: string;
}

export function pooledHttpLibrary(options: PooledHttpOptions = {}): HttpLibrary {
  const idleTimeoutMs = options.idleTimeoutMs ?? 30_000;
  const silenceTimeoutMs = options.silenceTimeoutMs ?? 75_000;
  const userAgent = options.userAgent ?? 'vmop';
  const pools = new Map<string, https.Agent>();

  /** One keep-alive agent per TLS identity (a rotated client certificate gets a new pool). */
  function pooledAgent(given: ReturnType<RequestContext['getAgent']>) {
    // Proxy agents (a kubeconfig's proxy-url) are used as client-node made them.
    if (!given || given.constructor !== https.Agent) return given;
    const tls: https.AgentOptions = {};
    // client-node decodes the kubeconfig's certificates anew for every request: key by content.
    const hash = createHash('sha256');
    for (const name of TLS_OPTIONS) {
      const value = given.options[name];
      if (value === undefined) continue;
      Object.assign(tls, { [name]: value });
      hash
        .update(`${name}:`)
        .update(Buffer.isBuffer(value) ? value : JSON.stringify(value))
        .update('\0');
    }
    const id = hash.digest('hex');
    let agent = pools.get(id);
    if (!agent) {
      agent = new https.Agent({ ...tls, keepAlive: true, timeout: idleTimeoutMs });
      pools.set(id, agent);
    }
    return agent;
  }

  function sendOnce(request: RequestContext, body: string | undefined) {
    return new Promise<{ response: ResponseContext } | { staleSocket: Error }>((resolve, reject) => {
      const headers: Record<string, string | number> = { 'User-Agent': userAgent, ...request.getHeaders() };
      if (body !== undefined) headers['Content-Length'] = Buffer.byteLength(body);
      const req = https.request(request.getUrl(), {
        method: request.getHttpMethod(),
        headers,
        agent: pooledAgent(request.getAgent()),
        signal: request.getSignal(),
      });
      req.setTimeout(silenceTimeoutMs, () =>
        req.destroy(new Error(`no answer from ${new URL(request.getUrl()).host} in ${silenceTimeoutMs} ms`)),
      );
      let answered = false;
      req.on('error', (err: NodeJS.ErrnoException) => {
        // A pooled connection the server closed while it was idle: nothing was processed, send again.
        if (!answered && req.reusedSocket && (err.code === 'ECONNRESET' || err.code === 'EPIPE'))
          resolve({ staleSocket: err });
        else reject(err);
      });
      req.on('response', (res) => {
        answered = true;
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('error', reject);
        res.on('end', () => {
          const data = Promise.resolve(Buffer.concat(chunks));
          resolve({
            response: new ResponseContext(res.statusCode ?? 0, flatHeaders(res.headers), {
              binary: () => data,
              text: () => data.then((buffer) => buffer.toString('utf8')),
            }),
          });
        });
      });
      req.end(body);
    });
  }

  return wrapHttpLibrary({
    async send(request) {
      const body = request.getBody();
      if (body !== undefined && typeof body !== 'string')
        throw new Error('pooled-http sends string bodies only (client-node sends JSON or YAML)');
      for (let tries = 1; ; tries++) {
        const outcome = await sendOnce(request, body);
        if ('response' in outcome) return outcome.response;
        if (tries >= 3) throw outcome.staleSocket;
      }
    },
  });
}

function flatHeaders(headers: IncomingHttpHeaders): Record<string, string> {
  const flat: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers))
    if (value !== undefined) flat[name] = Array.isArray(value) ? value.join(', ') : value;
  return flat;
}
