// A replica whose cache lags the apiserver must not undo newer work. Two replicas' VM reconcilers
// run in this process on the real apiserver and Redis, each with its own watches; replica B's VM
// watch goes through a proxy that holds back what the apiserver sends (a slow or partitioned
// link), so B's cached VM lags while its other caches and its writes are current.
import {
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  PatchStrategy,
  setHeaderOptions,
} from '@kubernetes/client-node';
import { Redis } from 'ioredis';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GROUP, KIND, PLURAL, VERSION } from '../../../src/api/virtual-machine.js';
import { installCrds } from '../../../src/devenv/install-crds.js';
import { startRedis, type RedisServer } from '../../../src/devenv/redis.js';
import { makeKubeClients } from '../../../src/kube/clients.js';
import type { ObjectCache } from '../../../src/kube/object-cache.js';
import { generationMarks, markingSink } from '../../../src/operator/generation-marks.js';
import { createWatchEdge, type WatchEdge } from '../../../src/operator/watch-edge.js';
import { createVmReconciler } from '../../../src/reconcilers/virtual-machine/reconcile.js';
import { eventually } from '../../support/eventually.js';
import { createTestNamespace, kubectl, sharedKubeConfig, type TestNamespace } from '../../support/kube.js';
import { startTcpProxy, type TcpProxy } from '../../support/tcp-proxy.js';
import { sharedCredentials } from '../../../src/operator/tenant-credentials.js';

const direct = sharedKubeConfig();
const custom = direct.makeApiClient(CustomObjectsApi);
const core = direct.makeApiClient(CoreV1Api);

describe('a replica with a lagging cache (real apiserver and Redis)', () => {
  let namespace: TestNamespace;
  let redisServer: RedisServer;
  let redis: Redis;
  let proxy: TcpProxy;
  const edges: WatchEdge[] = [];
  const logLines: Array<{ msg: string; key?: string }> = [];
  const logger = pino(
    { level: 'debug' },
    new Writable({
      write(chunk, _encoding, done) {
        logLines.push(JSON.parse(String(chunk)));
        done();
      },
    }),
  );
  let reconcileA: (key: string) => Promise<unknown>;
  let reconcileB: (key: string) => Promise<unknown>;
  let vmCacheOfB: ObjectCache;
  const ns = () => namespace.name;
  const key = (name: string) => `vm:${ns()}/${name}`;
  const vmRef = (name: string) => ({ group: GROUP, version: VERSION, plural: PLURAL, namespace: ns(), name });
  const readVm = async (name: string) =>
    (await custom.getNamespacedCustomObject(vmRef(name))) as {
      metadata: { generation: number; resourceVersion: string };
      status?: { observedGeneration?: number; phase?: string };
    };
  const configMap = (name: string) => core.readNamespacedConfigMap({ name, namespace: ns() });
  const cachedGeneration = (cache: ObjectCache, name: string) =>
    cache.get(KIND, ns(), name)?.metadata?.generation;

  beforeAll(async () => {
    await installCrds(direct);
    namespace = await createTestNamespace(direct, 'vmop-stale');
    redisServer = await startRedis();
    redis = new Redis(redisServer.url);
    const marks = generationMarks(redis);
    const server = new URL(direct.getCurrentCluster()!.server);
    proxy = await startTcpProxy({ host: server.hostname, port: Number(server.port) });
    const viaProxy = new KubeConfig();
    viaProxy.loadFromString(
      direct.exportConfig().replace(server.origin, `https://${server.hostname}:${proxy.port}`),
    );
    // Both replicas raise the marks from what their watches see, as managers do; no queue: the
    // test runs the reconciles itself.
    const sink = markingSink(marks, async () => undefined);
    const edgeA = createWatchEdge(direct, [ns()], sink, logger);
    const edgeB = createWatchEdge(viaProxy, [ns()], sink, logger);
    edges.push(edgeA, edgeB);
    await Promise.all(edges.map((edge) => edge.start()));
    vmCacheOfB = edgeB.cache;
    // B's VMs come through the stalling proxy; everything else it reads is as current as A's.
    const cacheOfB: ObjectCache = {
      get: (kind, namespace, name) => (kind === KIND ? edgeB.cache : edgeA.cache).get(kind, namespace, name),
      list: (kind, namespace, labels) =>
        (kind === KIND ? edgeB.cache : edgeA.cache).list(kind, namespace, labels),
    };
    const replica = (cache: ObjectCache) =>
      createVmReconciler({
        clients: makeKubeClients(direct),
        cache,
        newestGeneration: (k, uid) => marks.newest(k, uid),
        defaultRunnerImage: { image: 'localhost/vmop-runner:test' },
        redisCredentials: sharedCredentials('redis://runner@redis.invalid:6379'),
        logger,
      });
    reconcileA = replica(edgeA.cache);
    reconcileB = replica(cacheOfB);
  });

  afterAll(async () => {
    await Promise.all(edges.map((edge) => edge.stop()));
    await proxy?.close();
    redis?.disconnect();
    await redisServer?.stop();
    await namespace?.cleanup();
  });

  const createVm = async (name: string) => {
    await kubectl(
      ['apply', '-f', '-'],
      `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata: {name: ${name}, namespace: ${ns()}}
spec: {vm: {state: Stopped, maximumCpus: 2, currentCpus: 1, maximumRam: 256Mi, currentRam: 256Mi}}
`,
    );
    await eventually(() => expect(cachedGeneration(vmCacheOfB, name)).toBe(1), 10_000, 20);
  };

  it("waits for its cache instead of writing an older spec's config over a newer one (generation marks)", async () => {
    await createVm('marks');
    await reconcileA(key('marks'));
    expect((await configMap('marks')).data?.['config.yaml']).toContain('currentRam: 256Mi');

    proxy.stall();
    await custom.patchNamespacedCustomObject(
      { ...vmRef('marks'), body: { spec: { vm: { currentRam: '192Mi' } } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    await eventually(async () => expect((await readVm('marks')).metadata.generation).toBe(2), 10_000, 20);
    await reconcileA(key('marks')); // A's cache has generation 2 (its watch raised the mark)
    const written = await eventually(async () => {
      const map = await configMap('marks');
      expect(map.data?.['config.yaml']).toContain('currentRam: 192Mi');
      return map;
    }, 10_000);
    expect(cachedGeneration(vmCacheOfB, 'marks')).toBe(1); // B still sees the old spec

    // B's ConfigMap cache is current, its VM is not: without the mark it would write 256Mi back.
    expect(await reconcileB(key('marks'))).toEqual({ requeueAfter: 500 });
    const after = await configMap('marks');
    expect(after.metadata?.resourceVersion).toBe(written.metadata?.resourceVersion);
    expect(logLines.some((l) => l.msg === 'the cached VM is older than a seen change; trying again')).toBe(
      true,
    );

    proxy.resume();
    await eventually(() => expect(cachedGeneration(vmCacheOfB, 'marks')).toBe(2), 10_000, 20);
    await reconcileB(key('marks'));
    expect((await configMap('marks')).metadata?.resourceVersion).toBe(written.metadata?.resourceVersion);
  });

  it('writes no status derived from a VM older than the one the apiserver has (resourceVersion guard)', async () => {
    await createVm('guarded');
    proxy.stall(); // B keeps the VM as created: no status yet
    await reconcileA(key('guarded'));
    const byA = await eventually(async () => {
      const vm = await readVm('guarded');
      expect(vm.status?.observedGeneration).toBe(1);
      return vm;
    }, 10_000);
    const from = logLines.length;
    // B derives a status too, and its write carries the resourceVersion of its older copy.
    expect(await reconcileB(key('guarded'))).toEqual({ requeueAfter: 500 });
    expect((await readVm('guarded')).metadata.resourceVersion).toBe(byA.metadata.resourceVersion);
    expect(
      logLines
        .slice(from)
        .filter((l) => l.msg === 'the VM changed meanwhile; reconciling again once the cache has it'),
    ).toHaveLength(3);
    proxy.resume();
  });
});
