// A browser's upload into a VirtualMachineImage (the Images page), passed on to the image's importer
// pod (importer/upload.ts) through the apiserver, as `vmop image upload` sends it: a port-forward
// for each request, HTTPS to the end with the image's own certificate and its token, so the person
// needs no route to the pod network and never sees the token.
import type { KubeConfig } from '@kubernetes/client-node';
import type { IncomingMessage } from 'node:http';
import { request } from 'node:https';
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
  try {
    const response = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = request(
        {
          host: '127.0.0.1',
          port,
          servername: uploadServerHostname(name, namespace!),
          ca: certificate,
          // A connection of its own, closed with the answer: the forward carries this request only.
          agent: false,
          method: call.method,
          path: UPLOAD_PATH,
          headers: {
            [UPLOAD_TOKEN_HEADER]: token,
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
    return {
      status: response.statusCode!,
      offset: number(response.headers[UPLOAD_OFFSET_HEADER]),
      length: number(response.headers[UPLOAD_LENGTH_HEADER]),
      message,
    };
  } finally {
    server.close();
  }
}
