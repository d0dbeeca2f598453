import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';

export interface HttpEndpoints {
  port: number;
  close(): Promise<void>;
}

/** /healthz (the process answers), /readyz (isReady()), /metrics (Prometheus). */
export async function serveHttpEndpoints(
  port: number,
  host: string,
  registry: Registry,
  isReady: () => boolean,
): Promise<HttpEndpoints> {
  const server = http.createServer((request, response) => {
    const path = (request.url ?? '/').split('?')[0];
    if (path === '/healthz') return void response.writeHead(200).end('ok\n');
    if (path === '/readyz') {
      // A question the process cannot answer yet is a no, never its end.
      let ready = false;
      try {
        ready = isReady();
      } catch {
        ready = false;
      }
      return void response.writeHead(ready ? 200 : 503).end(ready ? 'ready\n' : 'not ready\n');
    }
    if (path === '/metrics') {
      registry.metrics().then(
        (body) => response.writeHead(200, { 'Content-Type': registry.contentType }).end(body),
        (err: unknown) => response.writeHead(500).end(String(err)),
      );
      return;
    }
    response.writeHead(404).end('not found\n');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
