// A watch whose apiserver becomes unreachable (a real apiserver behind a TCP proxy that resets
// every connection) is restarted with growing delays up to a cap, says when it is back, and starts
// a later outage from the short delay again, once it had stayed up for a while. Its cache, listed
// by an indexed label, holds what changed during the outage.
import { CoreV1Api, KubeConfig, type V1ConfigMap } from '@kubernetes/client-node';
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mergePatch } from '../../../src/kube/merge-patch.js';
import { watchObjects, type ObjectWatch } from '../../../src/kube/watch.js';
import { eventually } from '../../support/eventually.js';
import { createTestNamespace, sharedKubeConfig, type TestNamespace } from '../../support/kube.js';
import { startTcpProxy, type TcpProxy } from '../../support/tcp-proxy.js';

const RESTART = { backoff: { baseMs: 100, capMs: 800 }, stayedUpMs: 3_000 };

describe('watch restarts (real apiserver behind a proxy that cuts it off)', () => {
  const direct = sharedKubeConfig();
  let namespace: TestNamespace;
  let proxy: TcpProxy;
  let watch: ObjectWatch<V1ConfigMap>;
  const logs: Array<{ msg: string; retryInMs?: number; failures?: number; outageMs?: number }> = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      logs.push(JSON.parse(String(chunk)));
      done();
    },
  });
  const logger = pino({ level: 'debug' }, sink);
  /** The delays the watch chose after each failure, from its log, since `from`. */
  const delaysSince = (from: number) =>
    logs
      .slice(from)
      .filter((l) => l.msg.startsWith('watch failed'))
      .map((l) => l.retryInMs);
  const restoredSince = (from: number) => logs.slice(from).filter((l) => l.msg === 'watch restored');
  const createConfigMap = (name: string, labels?: Record<string, string>) =>
    direct
      .makeApiClient(CoreV1Api)
      .createNamespacedConfigMap({ namespace: namespace.name, body: { metadata: { name, labels } } });
  const namesLabelled = (owner: string) =>
    watch
      .list(namespace.name, { owner })
      .map((configMap) => configMap.metadata!.name!)
      .sort();

  beforeAll(async () => {
    namespace = await createTestNamespace(direct, 'vmop-watch');
    const server = new URL(direct.getCurrentCluster()!.server);
    proxy = await startTcpProxy({ host: server.hostname, port: Number(server.port) });
    const viaProxy = new KubeConfig();
    viaProxy.loadFromString(
      direct.exportConfig().replace(server.origin, `https://${server.hostname}:${proxy.port}`),
    );
    const core = viaProxy.makeApiClient(CoreV1Api);
    watch = watchObjects<V1ConfigMap>(
      viaProxy,
      {
        path: `/api/v1/namespaces/${namespace.name}/configmaps`,
        list: () => core.listNamespacedConfigMap({ namespace: namespace.name }),
        indexLabels: ['owner'],
      },
      {},
      logger,
      RESTART,
    );
    await watch.start();
  });

  afterAll(async () => {
    await watch?.stop();
    await proxy?.close();
    await namespace?.cleanup();
  });

  it('backs off 100, 200, 400, 800 ms, then stays at the 800 ms cap, and says when it is restored', async () => {
    const from = logs.length;
    proxy.cut();
    await eventually(() => expect(delaysSince(from).length).toBeGreaterThanOrEqual(7), 20_000, 50);
    proxy.restore();
    await eventually(() => expect(restoredSince(from)).toHaveLength(1), 10_000, 50);
    const delays = delaysSince(from);
    expect(delays.slice(0, 7)).toEqual([100, 200, 400, 800, 800, 800, 800]);
    expect(delays.slice(7).every((delay) => delay === 800)).toBe(true);
    // The attempts really were that far apart (never sooner; the clock of this process).
    const gaps = proxy.refusedAt.slice(1).map((at, i) => at - proxy.refusedAt[i]!);
    // The first failure is the open watch being cut; each later one is a restart the proxy refused.
    expect(proxy.refusedAt).toHaveLength(delays.length - 1);
    gaps.forEach((gap, i) => expect(gap).toBeGreaterThanOrEqual(delays[i + 1]! - 5));
    const restored = restoredSince(from)[0]!;
    expect(restored.failures).toBe(delays.length);
    expect(restored.outageMs).toBeGreaterThanOrEqual(delays.slice(0, -1).reduce((a, b) => a! + b!, 0)!);
    // The cache is live again: an object made after the outage shows up.
    await createConfigMap('after-the-outage');
    await eventually(() => expect(watch.get('after-the-outage', namespace.name)).toBeDefined(), 10_000, 50);
  });

  it('a failure soon after the restore continues the series; after a healthy period it starts over', async () => {
    let from = logs.length;
    proxy.cut(); // up for less than stayedUpMs: the same outage, still at the cap
    await eventually(() => expect(delaysSince(from).length).toBeGreaterThanOrEqual(1), 10_000, 50);
    proxy.restore();
    await eventually(() => expect(restoredSince(from)).toHaveLength(1), 10_000, 50);
    expect(delaysSince(from)[0]).toBe(800);

    await sleep(RESTART.stayedUpMs + 500);
    from = logs.length;
    proxy.cut();
    await eventually(() => expect(delaysSince(from).length).toBeGreaterThanOrEqual(3), 10_000, 50);
    proxy.restore();
    expect(delaysSince(from).slice(0, 3)).toEqual([100, 200, 400]);
    await eventually(() => expect(restoredSince(from)).toHaveLength(1), 10_000, 50);
  });

  it('listed by an indexed label, the cache holds what was relabelled, deleted and created while cut off', async () => {
    const core = direct.makeApiClient(CoreV1Api);
    await createConfigMap('moved', { owner: 'x' });
    await createConfigMap('deleted', { owner: 'x' });
    await eventually(() => expect(namesLabelled('x')).toEqual(['deleted', 'moved']), 10_000, 50);
    const from = logs.length;
    proxy.cut();
    await eventually(() => expect(delaysSince(from).length).toBeGreaterThanOrEqual(1), 10_000, 50);
    await core.patchNamespacedConfigMap(
      { namespace: namespace.name, name: 'moved', body: { metadata: { labels: { owner: 'y' } } } },
      mergePatch,
    );
    await core.deleteNamespacedConfigMap({ namespace: namespace.name, name: 'deleted' });
    await createConfigMap('created', { owner: 'x' });
    proxy.restore();
    await eventually(() => expect(restoredSince(from)).toHaveLength(1), 10_000, 50);
    await eventually(() => expect(namesLabelled('x')).toEqual(['created']), 10_000, 50);
    expect(namesLabelled('y')).toEqual(['moved']);
  });
});
