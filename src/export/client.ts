// A GET to a VirtualMachineExport's server pod through a port-forward (the apiserver and the pod's
// kubelet, as `kubectl port-forward`): it needs no route to the pod network and no address of the
// cluster's, only pods/portforward. HTTPS to the end: the server must show the export's own
// certificate (its status.certificate). Used by `vmop vm export -o`.
import type { KubeConfig } from '@kubernetes/client-node';
import type { IncomingMessage } from 'node:http';
import { request } from 'node:https';
import { listenForwarding } from '../kube/port-forward.js';
import {
  EXPORT_PORT,
  EXPORT_TOKEN_HEADER,
  exportServerHostnames,
  exportServerName,
} from '../api/virtual-machine-export.js';

export interface ExportServerGet {
  namespace: string;
  /** The export's name (its pod is named after it). */
  exportName: string;
  /** The path on the server, e.g. `/disks/system.qcow2`. */
  path: string;
  token: string;
  /** The export's status.certificate: the only one the server may show. */
  certificate: string;
  /** A Range header to pass on. */
  range?: string;
}

/**
 * The server's response; `close()` ends the forward once the body is read (or abandoned). The
 * forward listens on a loopback port of this process for the one request only.
 */
export async function getFromExportServer(
  kubeConfig: KubeConfig,
  get: ExportServerGet,
): Promise<{ response: IncomingMessage; close: () => void }> {
  const { server, port } = await listenForwarding(kubeConfig, {
    namespace: get.namespace,
    pod: () => exportServerName(get.exportName),
    port: EXPORT_PORT,
  });
  const close = () => server.close();
  try {
    const response = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = request(
        {
          host: '127.0.0.1',
          port,
          servername: exportServerHostnames(get.exportName, get.namespace)[0],
          ca: get.certificate,
          path: get.path,
          headers: { [EXPORT_TOKEN_HEADER]: get.token, ...(get.range && { range: get.range }) },
        },
        resolve,
      );
      req.on('error', reject);
      req.end();
    });
    response.once('close', close);
    return { response, close };
  } catch (err) {
    close();
    throw err;
  }
}
