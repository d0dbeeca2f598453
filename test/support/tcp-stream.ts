// A TCP stream to a VM's address through whatever happens meanwhile (a live migration): a client
// in a pod (kubectl exec, node) sends a line every 10 ms to an echo server and counts the echoes
// until told to stop; then says what it saw. A reset or any other error ends it early and is said.
import { expect } from 'vitest';

/** Runs in the pod: `node -e CLIENT host port stopFile`. */
const CLIENT = `
const net = require('net'); const fs = require('fs');
const [host, port, stopFile] = process.argv.slice(1);
const seen = { connected: false, sent: 0, echoed: 0, longestGapMs: 0 };
let last = 0, buffer = '', timer;
const done = () => { clearInterval(timer); console.log(JSON.stringify(seen)); process.exit(0); };
const socket = net.connect(Number(port), host, () => {
  seen.connected = true; last = Date.now();
  timer = setInterval(() => {
    if (fs.existsSync(stopFile)) { clearInterval(timer); setTimeout(done, 5000); return; }
    socket.write(seen.sent++ + '\\n');
  }, 10);
});
socket.setNoDelay(true);
socket.on('data', (data) => {
  buffer += data; const lines = buffer.split('\\n'); buffer = lines.pop();
  for (const line of lines) { const now = Date.now(); seen.longestGapMs = Math.max(seen.longestGapMs, now - last); last = now; seen.echoed++; }
  if (fs.existsSync(stopFile) && seen.echoed === seen.sent) done();
});
socket.on('error', (err) => { seen.error = err.code || err.message; done(); });
socket.on('close', () => { seen.closed = true; done(); });
`;

export interface TcpSeen {
  connected: boolean;
  sent: number;
  echoed: number;
  /** The longest time without an echo while the stream ran. */
  longestGapMs: number;
  /** ECONNRESET and the like. */
  error?: string;
  closed?: boolean;
}

export interface TcpStream {
  /** Stops sending, waits for the last echoes (5 s at most) and says what was seen. */
  stop(): Promise<TcpSeen>;
}

/** No reset, no close: every line sent came back (a move's gap is only a longer wait for one). */
export function expectUnbroken(seen: TcpSeen): void {
  expect(seen).toMatchObject({ connected: true });
  expect(seen.error).toBeUndefined();
  expect(seen.closed).toBeUndefined();
  expect(seen.sent).toBeGreaterThan(100);
  expect(seen.echoed).toBe(seen.sent);
}

let streams = 0;

/** Starts the stream from `pod`'s `container` (which has node) to `address:port`. */
export function startTcpStream(
  kubectl: (args: string[]) => Promise<string>,
  pod: string,
  container: string,
  address: string,
  port: number,
): TcpStream {
  const stopFile = `/tmp/tcp-stream-${process.pid}-${++streams}`;
  const inPod = (...command: string[]) => kubectl(['exec', pod, '-c', container, '--', ...command]);
  const ended = inPod('node', '-e', CLIENT, address, String(port), stopFile).then(
    (text) => ({ text }),
    (err: unknown) => ({ err }),
  );
  return {
    async stop() {
      await inPod('touch', stopFile);
      const result = await ended;
      if ('err' in result) throw result.err;
      return JSON.parse(result.text.trim().split('\n').pop()!) as TcpSeen;
    },
  };
}

/**
 * Starts a plain pod (no tap of its own) that idles with node (or runs `script` with it), for
 * streams and echoes: the runner image a VM's pod runs (`vmPod`), Pod Security restricted; on
 * `node` where given. Resolves when Ready.
 */
export async function startNodePod(
  kubectl: (args: string[], input?: string) => Promise<string>,
  options: { name: string; namespace: string; vmPod: string; node?: string; script?: string },
): Promise<void> {
  const script = options.script ?? 'setInterval(() => {}, 1 << 30)';
  const image = await kubectl(['get', 'pod', options.vmPod, '-o', 'jsonpath={.spec.containers[0].image}']);
  await kubectl(
    ['apply', '-n', options.namespace, '-f', '-'],
    `apiVersion: v1
kind: Pod
metadata: {name: ${options.name}, namespace: ${options.namespace}}
spec:
${options.node ? `  nodeName: ${options.node}\n` : ''}  containers:
  - name: node
    image: ${image}
    imagePullPolicy: Never
    command: [node, -e, ${JSON.stringify(script)}]
    securityContext:
      runAsNonRoot: true
      runAsUser: 65532
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
      seccompProfile: {type: RuntimeDefault}
`,
  );
  await kubectl([
    ...['wait', '-n', options.namespace, '--for=condition=Ready'],
    ...[`pod/${options.name}`, '--timeout=120s'],
  ]);
}

/** Runs in the pod: `node -e PROBE host port stopFile`; a new connection every 100 ms, one line echoed. */
const PROBE = `
const net = require('net'); const fs = require('fs');
const [host, port, stopFile] = process.argv.slice(1);
const seen = { attempts: 0, answered: 0, longestOutageMs: 0 };
const once = () => new Promise((resolve) => {
  const socket = net.connect(Number(port), host, () => socket.write('hello\\n'));
  const timer = setTimeout(() => socket.destroy(), 2000);
  const end = (ok) => { clearTimeout(timer); socket.destroy(); resolve(ok); };
  socket.on('data', (data) => end(String(data).trim() === 'hello'));
  socket.on('error', () => end(false));
  socket.on('close', () => end(false));
});
(async () => {
  let lastAnswer = Date.now();
  while (!fs.existsSync(stopFile)) {
    seen.attempts++;
    if (await once()) {
      const now = Date.now();
      seen.answered++; seen.longestOutageMs = Math.max(seen.longestOutageMs, now - lastAnswer); lastAnswer = now;
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  console.log(JSON.stringify(seen));
})();
`;

export interface ServiceSeen {
  attempts: number;
  /** Connections whose line came back. */
  answered: number;
  /** The longest time between two answered connections. */
  longestOutageMs: number;
}

/**
 * Opens a new connection to `host:port` (a Service) from `pod` every 100 ms until stopped, as
 * clients of a Service do through a move: each sends a line to an echo server and waits 2 s at most.
 */
export function startServiceProbe(
  kubectl: (args: string[]) => Promise<string>,
  pod: string,
  host: string,
  port: number,
): { stop(): Promise<ServiceSeen> } {
  const stopFile = `/tmp/service-probe-${process.pid}-${++streams}`;
  const inPod = (...command: string[]) => kubectl(['exec', pod, '--', ...command]);
  const ended = inPod('node', '-e', PROBE, host, String(port), stopFile);
  return {
    async stop() {
      await inPod('touch', stopFile);
      return JSON.parse((await ended).trim().split('\n').pop()!) as ServiceSeen;
    },
  };
}
