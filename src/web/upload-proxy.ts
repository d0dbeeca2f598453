// A browser's upload into a VirtualMachineImage (the Images page), passed on to the image's importer
// pod (importer/upload.ts) through the apiserver, as `vmop image upload` sends it: a port-forward
// kept for the upload's pieces, HTTPS to the end with the image's own certificate and its token,
// so the person needs no route to the pod network and never sees the token.
import type { KubeConfig } from '@kubernetes/client-node';
import type { IncomingMessage } from 'node:http';
import { Agent, request } from 'node:https';
import type { Readable } from 'node:stream';
import {
  UPLOAD_PORT,
  imageImporterPodName,
  imageUploadSecretName,
  uploadServerHostname,
  type VirtualMachineImage,
} from '../api/virtual-machine-image.js';
import {
  UPLOAD_LENGTH_HEADER,
  UPLOAD_OFFSET_HEADER,
  UPLOAD_PATH,
  UPLOAD_TOKEN_HEADER,
} from '../importer/upload.js';
import type { KubeClients } from '../kube/clients.js';
import { listenForwarding } from '../kube/port-forward.js';

export interface UploadAnswer {
  status: number;
  offset?: number;
  length?: number;
  message: string;
}

const number = (value: string | string[] | undefined) =>
  typeof value === 'string' && value !== '' ? Number(value) : undefined;

/**
 * One forward and one kept-alive HTTPS connection per upload while its pieces come: a forward and
 * a TLS handshake for each 8-MiB piece cost a browser's upload about a third of its time
 * (bench:web). It closes when unused for a while, or at its first failure (the next piece opens
 * a new one).
 */
interface Channel {
  port: number;
  agent: Agent;
  token: string;
  idle?: NodeJS.Timeout;
  close(): void;
}
const IDLE_MS = 30_000;
const channels = new Map<string, Promise<Channel>>();

function channelTo(
  kubeConfig: KubeConfig,
  clients: KubeClients,
  image: VirtualMachineImage,
): Promise<Channel> {
  const { name, namespace, uid } = image.metadata;
  const key = `${namespace}/${name}/${uid}`;
  const open = channels.get(key);
  if (open) return open;
  const opening = (async (): Promise<Channel> => {
    const secret = await clients.core.readNamespacedSecret({
      namespace: namespace!,
      name: imageUploadSecretName(name),
    });
    const token = Buffer.from(secret.data?.token ?? '', 'base64').toString('utf8');
    const { server, port } = await listenForwarding(kubeConfig, {
      namespace: namespace!,
      pod: () => imageImporterPodName(name),
      port: UPLOAD_PORT,
    });
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const channel: Channel = {
      port,
      agent,
      token,
      close() {
        clearTimeout(channel.idle);
        if (channels.get(key) === opening) channels.delete(key);
        agent.destroy();
        server.close();
      },
    };
    return channel;
  })();
  channels.set(key, opening);
  opening.catch(() => channels.delete(key));
  return opening;
}

/** A HEAD (where the upload stands) or a PATCH of `body` from `offset`, at the image's importer pod. */
export async function toUploadServer(
  kubeConfig: KubeConfig,
  clients: KubeClients,
  image: VirtualMachineImage,
  call: { method: 'HEAD' } | { method: 'PATCH'; offset: string; length: string; body: Readable },
): Promise<UploadAnswer> {
  const { name, namespace } = image.metadata;
  const certificate = image.status?.upload?.certificate;
  if (!certificate)
    return { status: 409, message: `${name} takes no upload now (${image.status?.phase ?? 'Pending'})` };
  const channel = await channelTo(kubeConfig, clients, image);
  clearTimeout(channel.idle);
  try {
    const response = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = request(
        {
          host: '127.0.0.1',
          port: channel.port,
          servername: uploadServerHostname(name, namespace!),
          ca: certificate,
          agent: channel.agent,
          method: call.method,
          path: UPLOAD_PATH,
          headers: {
            [UPLOAD_TOKEN_HEADER]: channel.token,
            ...(call.method === 'PATCH' && {
              [UPLOAD_OFFSET_HEADER]: call.offset,
              [UPLOAD_LENGTH_HEADER]: call.length,
            }),
          },
        },
        resolve,
      );
      req.on('error', reject);
      if (call.method === 'HEAD') return void req.end();
      call.body.on('error', (err) => req.destroy(err));
      call.body.pipe(req);
    });
    let message = '';
    for await (const chunk of response) message += String(chunk);
    channel.idle = setTimeout(() => channel.close(), IDLE_MS).unref();
    return {
      status: response.statusCode!,
      offset: number(response.headers[UPLOAD_OFFSET_HEADER]),
      length: number(response.headers[UPLOAD_LENGTH_HEADER]),
      message,
    };
  } catch (err) {
    channel.close();
    throw err;
  }
}
