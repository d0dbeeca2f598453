// A local port forwarded to a pod through the apiserver, when the forward cannot open (here: the
// pod does not exist, as a pod not running yet gets a 400 too): the connection ends, the error is
// told to onError, and the process lives on. It used to die of an unheard 'error' event, printing
// the WebSocket request with its bearer token (a web GUI manager did).
import { KubeConfig } from '@kubernetes/client-node';
import { connect } from 'node:net';
import { describe, expect, inject, it } from 'vitest';
import { listenForwarding } from '../../../src/kube/port-forward.js';

describe('listenForwarding', () => {
  it('ends a connection whose forward the apiserver refuses, and says why; nothing throws', async () => {
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromString(inject('kubeconfigYaml'));
    const errors: Error[] = [];
    const { server, port } = await listenForwarding(kubeConfig, {
      namespace: 'default',
      pod: () => 'no-such-pod',
      port: 8443,
      onError: (err) => errors.push(err),
    });
    try {
      for (let attempt = 0; attempt < 2; attempt++) {
        const ended = await new Promise<string>((resolve) => {
          const client = connect(port, '127.0.0.1');
          client.on('error', (err) => resolve(`error ${err.message}`));
          client.on('close', () => resolve('closed'));
          client.write('HEAD /upload HTTP/1.1\r\nHost: x\r\n\r\n');
        });
        expect(ended).toMatch(/^(closed|error )/);
      }
      expect(errors.length).toBeGreaterThanOrEqual(2);
      expect(errors[0]!.message).toMatch(/^port-forward to 8443: .*(404|400|not found)/i);
      expect(errors.map((err) => err.message).join('\n')).not.toMatch(/Bearer|Authorization/);
    } finally {
      server.close();
    }
  });
});
