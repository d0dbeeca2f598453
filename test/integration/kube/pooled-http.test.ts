import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import type { ClientRequest } from 'node:http';
import { CoreV1Api, KubeConfig, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { describe, expect, inject, it } from 'vitest';
import { PooledKubeConfig } from '../../../src/kube/config.js';

/** Runs `work` and counts the HTTP responses it got over a new connection rather than a pooled one. */
async function newConnectionsDuring(work: () => Promise<void>): Promise<number> {
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

const load = <T extends KubeConfig>(kubeConfig: T) => {
  kubeConfig.loadFromString(inject('kubeconfigYaml'));
  return kubeConfig;
};

describe('API clients of a PooledKubeConfig', () => {
  it("reuse their connections (client-node's own clients open one per request)", async () => {
    const fiveReads = (kubeConfig: KubeConfig) => async () => {
      const core = kubeConfig.makeApiClient(CoreV1Api);
      for (let i = 0; i < 5; i++) await core.readNamespace({ name: 'default' });
    };
    expect(await newConnectionsDuring(fiveReads(load(new KubeConfig())))).toBe(5);
    expect(await newConnectionsDuring(fiveReads(load(new PooledKubeConfig())))).toBe(1);
  });

  it('answer every one of many reads and lists in flight at once', async () => {
    // The load under which node-fetch on a shared keep-alive agent failed about half its requests
    // with a false "Premature close" (Node 20.19, the images' Node; FACTS.md).
    const core = load(new PooledKubeConfig()).makeApiClient(CoreV1Api);
    const failures: string[] = [];
    const opened = await newConnectionsDuring(async () => {
      for (let round = 0; round < 40; round++) {
        const results = await Promise.allSettled(
          Array.from({ length: 16 }, (_, i) =>
            i % 2
              ? core.listNamespacedConfigMap({ namespace: 'kube-system' })
              : core.readNamespace({ name: 'default' }),
          ),
        );
        for (const result of results) if (result.status === 'rejected') failures.push(String(result.reason));
      }
    });
    expect(failures).toEqual([]);
    expect(opened).toBeLessThanOrEqual(16);
  });

  it('fail a request that gets no answer for their silence timeout instead of waiting forever', async () => {
    const core = load(new PooledKubeConfig({ silenceTimeoutMs: 1_000 })).makeApiClient(CoreV1Api);
    // A watch sends what exists and then nothing: an apiserver that stopped answering, as seen from here.
    const watch = core.listNamespacedConfigMap({ namespace: 'kube-system', watch: true, timeoutSeconds: 30 });
    await expect(watch).rejects.toThrow(/no answer from .* in 1000 ms/);
  });

  it("name vmop as the field manager of writes that name none (the apiserver's default: unknown)", async () => {
    const core = load(new PooledKubeConfig()).makeApiClient(CoreV1Api);
    const namespace = 'default';
    const name = `field-manager-${Date.now()}`;
    await core.createNamespacedConfigMap({ namespace, body: { metadata: { name }, data: { a: '1' } } });
    await core.patchNamespacedConfigMap(
      { name, namespace, body: { data: { b: '2' } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    const managers = (await core.readNamespacedConfigMap({ name, namespace })).metadata!.managedFields!;
    expect(managers.map((entry) => [entry.manager, entry.operation])).toEqual([['vmop', 'Update']]);
    await core.deleteNamespacedConfigMap({ name, namespace });
  });
});
