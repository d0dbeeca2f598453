// A local TCP port whose connections each reach a port of a pod through the apiserver and the
// pod's kubelet (as `kubectl port-forward`): no route to the pod network and no cluster address
// needed, only the person's pods/portforward.
import { PortForward, type KubeConfig } from '@kubernetes/client-node';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { PassThrough, type Readable, type Writable } from 'node:stream';

export interface ForwardedPort {
  namespace: string;
  /** The pod, asked again for each connection (a VM's pod changes with a live migration). */
  pod: () => string | Promise<string>;
  port: number;
  /** The local port; 0 (the default) takes a free one. */
  localPort?: number;
  /** The local address; loopback unless said otherwise. */
  localAddress?: string;
  /** A connection whose forward could not be opened. */
  onError?: (err: Error) => void;
}

/** The WebSocket client-node carries a forward on (its type, without depending on its WebSocket package). */
type ForwardSocket = Exclude<Awaited<ReturnType<PortForward['portForward']>>, (...args: never[]) => unknown>;

export interface ForwardTarget {
  namespace: string;
  pod: string;
  port: number;
}

/** Opens a forward of `input` to the pod's port, its answers to `output`; the WebSocket carrying it. */
export async function openForward(
  kubeConfig: KubeConfig,
  target: ForwardTarget,
  output: Writable,
  input: Readable,
  errors: Writable | null = null,
): Promise<ForwardSocket | undefined> {
  const forward = await new PortForward(kubeConfig).portForward(
    target.namespace,
    target.pod,
    [target.port],
    output,
    errors,
    input,
  );
  return (typeof forward === 'function' ? forward() : forward) ?? undefined;
}

/**
 * Forwards one accepted socket to the pod's port. What the kubelet says on the error stream (the
 * pod's port refused the connection, say) ends the socket with that message, as does the end of
 * the forward: a client is never left waiting on a connection nothing carries any more.
 */
export async function forwardSocket(
  kubeConfig: KubeConfig,
  target: ForwardTarget,
  socket: Socket,
): Promise<void> {
  const errors = new PassThrough();
  errors.on('data', (message: Buffer) =>
    socket.destroy(new Error(`port-forward to ${target.pod}:${target.port}: ${String(message).trim()}`)),
  );
  const forward = await openForward(kubeConfig, target, socket, socket, errors);
  socket.on('close', () => forward?.close());
  forward?.on('close', () => socket.end());
  forward?.on('error', (err: Error) => socket.destroy(err));
}

/** Listens until closed; resolves once listening, with the port it listens on. */
export async function listenForwarding(
  kubeConfig: KubeConfig,
  forwarded: ForwardedPort,
): Promise<{ server: Server; port: number }> {
  const server = createServer((socket) => {
    // A forward that could not open or broke off ends this connection and is told to onError. Its
    // error must have a listener: unheard, the process would die of it, printing the WebSocket
    // request with its bearer token (a manager did, for an apiserver's 400 to a pod not yet running).
    socket.on('error', (err) => forwarded.onError?.(err));
    void (async () =>
      forwardSocket(kubeConfig, { ...forwarded, pod: await forwarded.pod() }, socket))().catch((err: Error) =>
      socket.destroy(new Error(`port-forward to ${forwarded.port}: ${err.message}`)),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(forwarded.localPort ?? 0, forwarded.localAddress ?? '127.0.0.1', () => resolve());
  });
  return { server, port: (server.address() as AddressInfo).port };
}
