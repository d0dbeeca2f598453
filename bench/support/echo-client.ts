// A TCP client against an echo server, run with `node -e ECHO_CLIENT host port bytes roundTrips
// newConnections` where the client is (a pod, this machine): one line of JSON with the throughput
// (`bytes` sent and echoed back on one connection, MB/s each way), round trips of one line on an
// open connection, and a request per new connection (connect, line, echo), in ms.
import { quantile } from './quantile.js';

export const ECHO_CLIENT = `
const net = require('net');
const [host, port, bytes, roundTrips, newConnections] = process.argv.slice(1).map((v, i) => (i ? Number(v) : v));
const connect = () => new Promise((resolve, reject) => {
  const s = net.connect(port, host, () => resolve(s)); s.setNoDelay(true); s.once('error', reject);
});
const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;
async function throughput() {
  const s = await connect(); const chunk = Buffer.alloc(65536, 120); const t0 = process.hrtime.bigint();
  let got = 0, sent = 0;
  const done = new Promise((resolve) => s.on('data', (d) => { got += d.length; if (got >= bytes) resolve(ms(t0)); }));
  const pump = () => { while (sent < bytes) { sent += chunk.length; if (!s.write(chunk)) return void s.once('drain', pump); } };
  pump(); const took = await done; s.destroy(); return (bytes / 1e6) / (took / 1000);
}
const once = (s) => new Promise((resolve) => { const t0 = process.hrtime.bigint(); s.once('data', () => resolve(ms(t0))); s.write('x\\n'); });
(async () => {
  const mbs = await throughput();
  const s = await connect(); const rtt = [];
  for (let i = 0; i < roundTrips; i++) rtt.push(await once(s));
  s.destroy();
  const request = [];
  for (let i = 0; i < newConnections; i++) {
    const t0 = process.hrtime.bigint(); const c = await connect(); await once(c); request.push(ms(t0)); c.destroy();
  }
  console.log(JSON.stringify({ mbs, rtt, request }));
})().catch((err) => { console.log(JSON.stringify({ error: String(err) })); });
`;

export interface EchoSeen {
  mbs: number;
  rtt: number[];
  request: number[];
  error?: string;
}

export const ECHO_BYTES = 32 * 1024 * 1024;
export const ROUND_TRIPS = 200;
export const NEW_CONNECTIONS = 50;

/** The client's arguments after the script. */
export const echoClientArgs = (host: string, port: number) => [
  host,
  String(port),
  String(ECHO_BYTES),
  String(ROUND_TRIPS),
  String(NEW_CONNECTIONS),
];

/** Runs the client `runs` times through `exec` (which runs `node -e ECHO_CLIENT ...args`); the median throughput, all latencies. */
export async function measureEcho(
  exec: (args: string[]) => Promise<string>,
  host: string,
  port: number,
  runs: number,
): Promise<EchoSeen> {
  const seen: EchoSeen[] = [];
  for (let i = 0; i < runs; i++) {
    const out = await exec(['-e', ECHO_CLIENT, ...echoClientArgs(host, port)]);
    const one = JSON.parse(out.trim().split('\n').pop()!) as EchoSeen;
    if (one.error) throw new Error(`${host}:${port}: ${one.error}`);
    seen.push(one);
  }
  return {
    mbs: quantile(
      seen.map((one) => one.mbs),
      0.5,
    ),
    rtt: seen.flatMap((one) => one.rtt),
    request: seen.flatMap((one) => one.request),
  };
}

export const ECHO_HEADER = `${'target'.padEnd(44)}    MB/s  ×base  rtt p50/p99 ms   request p50/p99 ms`;

/** A table row: throughput, its ratio to `baseline`, latencies. */
export function echoRow(label: string, seen: EchoSeen, baseline: EchoSeen): string {
  const pair = (values: number[]) =>
    `${quantile(values, 0.5).toFixed(2)}/${quantile(values, 0.99).toFixed(2)}`;
  return (
    `${label.padEnd(44)} ${seen.mbs.toFixed(1).padStart(7)} ${(seen.mbs / baseline.mbs).toFixed(3).padStart(6)}  ` +
    `${pair(seen.rtt).padEnd(16)} ${pair(seen.request)}`
  );
}
