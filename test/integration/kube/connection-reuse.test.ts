import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import type { ClientRequest } from 'node:http';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { describe, expect, inject, it } from 'vitest';
import { reuseConnections } from '../../../src/kube/config.js';

/** HTTP requests made while `work` runs that opened a new connection rather than reusing one. */
async function connectionsDuring(work: () => Promise<void>): Promise<number> {
  let opened = 0;
  const count = (message: unknown) => {
    if (!(message as { request: ClientRequest }).request.reusedSocket) opened++;
  };
  subscribe('http.client.response.finish', count);
  try {
    await work();
  } finally {
    unsubscribe('http.client.response.finish', count);
  }
  return opened;
}

const fiveReads = (kubeConfig: KubeConfig) => async () => {
  const core = kubeConfig.makeApiClient(CoreV1Api);
  for (let i = 0; i < 5; i++) await core.readNamespace({ name: 'default' });
};

describe('apiserver connections', () => {
  const kubeconfig = () => {
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromString(inject('kubeconfigYaml'));
    return kubeConfig;
  };

  it("are reused across requests (client-node's own agent makes one connection per request)", async () => {
    expect(await connectionsDuring(fiveReads(kubeconfig()))).toBe(5);
    expect(await connectionsDuring(fiveReads(reuseConnections(kubeconfig())))).toBe(1);
  });
});
