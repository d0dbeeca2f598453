// The manager process: watches → keyed work queue → reconcilers (of VMs and their operations). Any number of replicas may run
// against one queue; the queue keeps each key to one handler at a time, so no leader election.
import type { KubernetesObject, V1Pod, V1Secret } from '@kubernetes/client-node';
import { ensureSnapshotNotifications, followSnapshotWrites } from '../queue/snapshot-writes.js';
import { RUNNER_SECRET } from '../reconcilers/virtual-machine/runner-config/identity.js';
import { sharedCredentials, tenantCredentials } from './tenant-credentials.js';
import { tenantKeysOf } from './tenant-keys.js';
import { apiserverEndpoint, importDestinations } from './import-destinations.js';
import { Registry, collectDefaultMetrics } from 'prom-client';
import { z } from 'zod';
import { EvictionStrategy, KIND } from '../api/virtual-machine.js';
import { NetworkPolicyPeer } from '../api/kubernetes-types.js';
import { makeKubeClients, readableApiError } from '../kube/clients.js';
import { loadKubeConfig } from '../kube/config.js';
import {
  TerminalError,
  openWorkQueue,
  startWorkers,
  type HandlerResult,
  type KeyHandler,
} from '../queue/index.js';
import { connectRedis, RedisUrlSchema } from '../queue/connection.js';
import { DEFAULT_OVERCOMMIT } from '../reconcilers/virtual-machine/runner-pod/pod.js';
import { vmKey } from '../reconcilers/virtual-machine/naming.js';
import { createVmReconciler } from '../reconcilers/virtual-machine/reconcile.js';
import { createOperationReconciler } from '../reconcilers/virtual-machine-operation/reconcile.js';
import { OPERATION_KIND, operationKey } from '../api/virtual-machine-operation.js';
import { IMAGE_KIND, imageKey } from '../api/virtual-machine-image.js';
import { createImageReconciler } from '../reconcilers/virtual-machine-image/reconcile.js';
import { SNAPSHOT_KIND, snapshotKey } from '../api/virtual-machine-snapshot.js';
import { createSnapshotReconciler } from '../reconcilers/virtual-machine-snapshot/reconcile.js';
import { RESTORE_KIND, restoreKey } from '../api/virtual-machine-restore.js';
import { createRestoreReconciler } from '../reconcilers/virtual-machine-restore/reconcile.js';
import { EXPORT_KIND, exportKey } from '../api/virtual-machine-export.js';
import { createExportReconciler } from '../reconcilers/virtual-machine-export/reconcile.js';
import { CLONE_KIND, cloneKey } from '../api/virtual-machine-clone.js';
import { createCloneReconciler } from '../reconcilers/virtual-machine-clone/reconcile.js';
import { SCHEDULE_KIND, scheduleKey } from '../api/virtual-machine-snapshot-schedule.js';
import { createScheduleReconciler } from '../reconcilers/virtual-machine-snapshot-schedule/reconcile.js';
import { createClassReconciler } from '../reconcilers/virtual-machine-class/reconcile.js';
import { CLASS_KIND, classKey } from '../api/virtual-machine-class.js';
import { IP_ADDRESS_KIND, LEASE_KIND, ipAddressKey, leaseKey } from '../api/virtual-machine-ip-address.js';
import { createIpAddressReconciler } from '../reconcilers/virtual-machine-ip-address/reconcile.js';
import { createLeaseReconciler } from '../reconcilers/virtual-machine-ip-address/lease.js';
import { registerVmStateMetrics, vmTransitionMetrics } from './vm-metrics.js';
import { registerSnapshotMetrics } from './snapshot-metrics.js';
import { VmCidr, parsedSubnets } from '../reconcilers/virtual-machine-ip-address/subnets.js';
import { createLogger } from '../util/logger.js';
import { serveHttpEndpoints } from '../util/http-endpoints.js';
import { importProgressReader, snapshotReader } from './snapshots.js';
import { runnerRequestSender } from './runner-requests.js';
import { migrationSlots } from './migration-slots.js';
import { RunnerUpdateMethod } from '../reconcilers/virtual-machine/runner-pod/update.js';
import { MIGRATION_DEADLINE_MS } from '../reconcilers/virtual-machine/migration/plan.js';
import { generationMarks, markingSink } from './generation-marks.js';
import { createWatchEdge, type WatchEventSummary } from './watch-edge.js';
import { WebOptions } from '../web/options.js';
import { startWebServer } from '../web/server.js';
import { redisPoolLock } from '../pools/pool-lock.js';
import { eventRecorder } from '../reconcilers/events.js';
import {
  CONFIGURATION_CLAIM_TIMING,
  claimConfiguration,
  configurationDigest,
} from './configuration-claim.js';

export const DEFAULT_RUNNER_IMAGE = 'ghcr.io/vmop/vmop-runner:latest';

export const ManagerOptions = z.object({
  /** A kubeconfig file; default: $KUBECONFIG, ~/.kube/config or the in-cluster service account. */
  kubeconfig: z.string().optional(),
  /** Namespaces to watch; all when empty. */
  namespaces: z.array(z.string().min(1)).default([]),
  redisUrl: RedisUrlSchema,
  concurrency: z.number().int().positive().default(16),
  /** Reconciles per second across all replicas; unlimited when absent. */
  rateLimitPerSecond: z.number().positive().optional(),
  metricsPort: z.number().int().min(0).max(65535).default(8080),
  metricsHost: z.string().default('0.0.0.0'),
  runnerImage: z.string().min(1).default(DEFAULT_RUNNER_IMAGE),
  runnerImagePullPolicy: z.enum(['Always', 'IfNotPresent', 'Never']).optional(),
  /** Runner images a VM may name in spec.image besides the default (exact, or a prefix ending in `*`). */
  allowedRunnerImages: z.array(z.string().min(1)).default([]),
  /** Whether runner pods ask for /dev/kvm (vmop's node agent); off where nodes have no KVM (QEMU emulates). */
  kvm: z.boolean().default(true),
  /** Namespaces whose VMs may have host-bridge tap networks (a privileged runner on the node's network). */
  hostNetworkNamespaces: z.array(z.string().min(1)).default([]),
  /** Whether a SPICE display may run without a password (open to whoever reaches the runner pod). */
  allowDisplayWithoutPassword: z.boolean().default(false),
  /** Networks, addresses or address:ports importers may not fetch from, besides the cluster's own endpoints. */
  importDeniedNetworks: z.array(z.string().min(1)).default([]),
  /** …and those they may, even so. */
  importAllowedNetworks: z.array(z.string().min(1)).default([]),
  /** The Redis URL runners publish to, with the runner's credential; default: redisUrl (the manager's). */
  runnerRedisUrl: RedisUrlSchema.optional(),
  /** The StorageClass of new runner data claims; the cluster's default when absent. */
  runnerDataStorageClass: z.string().min(1).optional(),
  /** ReadWriteMany on shared storage lets VMs migrate live. */
  runnerDataAccessMode: z.enum(['ReadWriteOnce', 'ReadWriteMany']).default('ReadWriteOnce'),
  /** What an eviction does to a VM without spec.evictionStrategy. */
  evictionStrategy: EvictionStrategy.default('LiveMigrateIfPossible'),
  /** What an upgrade does to a running VM left on an older runner image. */
  runnerUpdate: RunnerUpdateMethod.default('LiveMigrate'),
  /** Live migrations at once: in the cluster, and out of one node (KubeVirt's defaults). */
  migrationLimits: z
    .object({ perCluster: z.number().int().positive(), outboundPerNode: z.number().int().positive() })
    .default({ perCluster: 5, outboundPerNode: 2 }),
  /** The subnets VMs get addresses of their own from (Deckhouse's virtualMachineCIDRs); none: no addresses. */
  vmCidrs: z.array(VmCidr).default([]),
  /** How long a deleted VM's address stays with its namespace (Deckhouse: 10 minutes). */
  ipAddressHoldSeconds: z.number().int().min(0).default(600),
  cpuOvercommit: z.number().positive().default(DEFAULT_OVERCOMMIT.cpu),
  ramOvercommit: z.number().positive().default(DEFAULT_OVERCOMMIT.ram),
  /** A LoadBalancer Service for every VM with SPICE (VM-Operator's loadBalancerService), with these labels/annotations. */
  loadBalancerService: z
    .object({
      enabled: z.boolean().default(false),
      labels: z.record(z.string(), z.string()).default({}),
      annotations: z.record(z.string(), z.string()).default({}),
    })
    .default({ enabled: false, labels: {}, annotations: {} }),
  /**
   * A NetworkPolicy for each VM's runner pods: vmop's listeners only for the VM's own pods and
   * these peers (the managers; Prometheus for metrics), the guest's ports as a pod's.
   */
  runnerNetworkPolicy: z
    .object({
      enabled: z.boolean().default(false),
      ingressFrom: z.array(NetworkPolicyPeer).default([]),
      metricsFrom: z.array(NetworkPolicyPeer).default([]),
    })
    .default({ enabled: false, ingressFrom: [], metricsFrom: [] }),
  /** Off only to measure what users would get without it (bench:changes). */
  configNudge: z.boolean().default(true),
  resyncIntervalMs: z
    .number()
    .int()
    .positive()
    .default(10 * 60_000),
  /** The web GUI, when set. */
  web: WebOptions.optional(),
});
export type ManagerOptions = z.input<typeof ManagerOptions>;

/**
 * What shapes the replicas' writes: every setting but those of one replica's process (its ports,
 * kubeconfig, concurrency), the queue's own and the web GUI's. Replicas of one release share them.
 */
const ReconcileSettings = ManagerOptions.omit({
  kubeconfig: true,
  redisUrl: true,
  concurrency: true,
  rateLimitPerSecond: true,
  metricsPort: true,
  metricsHost: true,
  resyncIntervalMs: true,
  web: true,
});

export interface RunningManager {
  metricsPort: number;
  /** The web GUI's port, when it is served. */
  webPort?: number;
  stop(): Promise<void>;
}

/**
 * Reconciles take milliseconds, and a key held by a replica that died waits for its lock to expire
 * (a live one renews it every half of lockDurationMs) and for the next stalled check: at most
 * 3 + 1.5 s here. Shorter costs more Redis calls per second at idle (see FACTS.md).
 */
export const KEY_LOCK = { lockDurationMs: 3_000, stalledIntervalMs: 1_500 };

/** How long a namespace whose runner credential flooded Redis may not use it. */
const FLOOD_SUSPEND_MS = 10_000;
/** How long pod changes gather before a namespace's runner keys follow them. */
const POD_CHANGES_MS = 50;
/**
 * A migration's slot is let go when it ends, by its deadline at the latest: a slot held longer
 * was left by a replica that died. One waiting asks again every 2 s; after 30 s it lost its place.
 */
const MIGRATION_SLOT_LEASES = { runningMs: MIGRATION_DEADLINE_MS + 60_000, waitingMs: 30_000 };

export async function startManager(input: ManagerOptions): Promise<RunningManager> {
  const options = ManagerOptions.parse(input);
  const logger = createLogger('manager');
  const kubeConfig = loadKubeConfig(options.kubeconfig);
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const namespaces = options.namespaces.length > 0 ? options.namespaces : undefined;
  const watchesNamespace = (namespace: string | undefined) =>
    namespace !== undefined && (!namespaces || namespaces.includes(namespace));
  const subnets = parsedSubnets(options.vmCidrs);

  const redis = connectRedis(options.redisUrl, { maxRetriesPerRequest: 3 });
  redis.on('error', (err) => logger.warn({ err: err.message }, 'snapshot Redis connection error'));
  if (!options.runnerRedisUrl) {
    logger.warn("no --runner-redis-url: runners publish with the manager's own Redis credential");
  }
  const clients = makeKubeClients(kubeConfig);
  const queue = openWorkQueue({ redisUrl: options.redisUrl });
  // Namespaces with runner pods (the manager gave them their runner Secret): whose users must
  // exist in Redis.
  const runnerNamespaces = () =>
    watches.cache
      .list<V1Secret>('Secret', undefined)
      .filter((secret) => secret.metadata?.name === RUNNER_SECRET)
      .map((secret) => secret.metadata!.namespace!);
  // A namespace's runners may write the keys of the pods vmop made there.
  const runnerKeys = (namespace: string) =>
    tenantKeysOf(namespace, watches.cache.list<V1Pod>('Pod', namespace));
  const tenantUsers = options.runnerRedisUrl
    ? tenantCredentials({
        redis,
        runnerRedisUrl: options.runnerRedisUrl,
        knownNamespaces: runnerNamespaces,
        keysOf: runnerKeys,
        logger,
      })
    : undefined;
  const redisCredentials = tenantUsers ?? sharedCredentials(options.redisUrl);
  const marks = generationMarks(redis);
  const enqueue = markingSink(marks, (key: string, event: WatchEventSummary) => queue.add(key, { event }));
  const watches = createWatchEdge(kubeConfig, namespaces, enqueue, logger);
  const runnerImage = {
    image: options.runnerImage,
    ...(options.runnerImagePullPolicy && { pullPolicy: options.runnerImagePullPolicy }),
  };
  const importRules = importDestinations(
    watches.cache,
    apiserverEndpoint(kubeConfig.getCurrentCluster()?.server),
    { deny: options.importDeniedNetworks, allow: options.importAllowedNetworks },
  );
  const reconcileVm = createVmReconciler({
    clients,
    cache: watches.cache,
    newestGeneration: (key, uid) => marks.newest(key, uid),
    readSnapshot: snapshotReader(redis, logger),
    readImportProgress: importProgressReader(redis),
    sendRunnerRequest: runnerRequestSender(redis),
    migrationSlots: migrationSlots(redis, options.migrationLimits, MIGRATION_SLOT_LEASES),
    runnerUpdate: options.runnerUpdate,
    defaultRunnerImage: runnerImage,
    allowedRunnerImages: options.allowedRunnerImages,
    kvm: options.kvm,
    hostNetworkNamespaces: options.hostNetworkNamespaces,
    ipAddresses: subnets.length > 0,
    allowDisplayWithoutPassword: options.allowDisplayWithoutPassword,
    importDestinations: importRules,
    redisCredentials,
    overcommit: { cpu: options.cpuOvercommit, ram: options.ramOvercommit },
    runnerDataStorageClass: options.runnerDataStorageClass,
    runnerDataAccessMode: options.runnerDataAccessMode,
    evictionStrategy: options.evictionStrategy,
    loadBalancer: options.loadBalancerService,
    runnerNetworkPolicy: options.runnerNetworkPolicy,
    configNudge: options.configNudge,
    onTransition: vmTransitionMetrics(registry),
    logger,
  });
  registerVmStateMetrics(registry, watches.cache);
  registerSnapshotMetrics(registry, watches.cache);
  const reconcileOperation = createOperationReconciler({
    clients,
    cache: watches.cache,
    evictionStrategy: options.evictionStrategy,
    logger,
  });
  const reconcileImage = createImageReconciler({
    clients,
    cache: watches.cache,
    defaultRunnerImage: runnerImage,
    redisCredentials,
    importDestinations: importRules,
    readImportProgress: importProgressReader(redis),
    logger,
  });
  const reconcileSnapshot = createSnapshotReconciler({
    clients,
    cache: watches.cache,
    defaultRunnerImage: runnerImage,
    fenceExports: options.runnerNetworkPolicy.enabled,
    logger,
  });
  const reconcileRestore = createRestoreReconciler({
    clients,
    cache: watches.cache,
    defaultRunnerImage: runnerImage,
    logger,
  });
  const reconcileExport = createExportReconciler({
    clients,
    cache: watches.cache,
    defaultRunnerImage: runnerImage,
    logger,
  });
  const reconcileClone = createCloneReconciler({ clients, cache: watches.cache, logger });
  const reconcileSchedule = createScheduleReconciler({ clients, cache: watches.cache, logger });
  const reconcileClass = createClassReconciler({ clients, cache: watches.cache, logger });
  const reconcileIpAddress = createIpAddressReconciler({ clients, cache: watches.cache, subnets, logger });
  const reconcileLease = createLeaseReconciler({
    clients,
    cache: watches.cache,
    holdMs: options.ipAddressHoldSeconds * 1000,
    logger,
  });
  /** By the prefix of their work keys. */
  const reconcilers = new Map<string, (key: string) => Promise<HandlerResult>>([
    ['vm', reconcileVm],
    ['vmop', reconcileOperation],
    ['image', reconcileImage],
    ['vmsnapshot', reconcileSnapshot],
    ['vmrestore', reconcileRestore],
    ['vmclone', reconcileClone],
    ['vmexport', reconcileExport],
    ['vmsnapshotschedule', reconcileSchedule],
    ['vmclass', reconcileClass],
    ['vmip', reconcileIpAddress],
    ['vmipl', reconcileLease],
  ]);
  const handler: KeyHandler = async (key) => {
    // A worker paused while it waited for a key still takes that one (BullMQ): it goes back to the
    // replicas of the current configuration.
    if (!configuration.current) return { requeueAfter: CONFIGURATION_CLAIM_TIMING.pollMs };
    const reconcile = reconcilers.get(key.slice(0, key.indexOf(':')));
    if (!reconcile) throw new TerminalError(`no reconciler for key ${key}`);
    logger.debug({ key }, 'reconcile start');
    try {
      return await reconcile(key);
    } catch (err) {
      throw readableApiError(err);
    } finally {
      logger.debug({ key }, 'reconcile end');
    }
  };

  /** The work keys of the cached objects of a namespaced kind, of one namespace or of all. */
  const keysOf = (
    kind:
      | typeof KIND
      | typeof OPERATION_KIND
      | typeof IMAGE_KIND
      | typeof SNAPSHOT_KIND
      | typeof RESTORE_KIND
      | typeof CLONE_KIND
      | typeof EXPORT_KIND
      | typeof SCHEDULE_KIND
      | typeof IP_ADDRESS_KIND,
    key: (namespace: string, name: string) => string,
    namespace?: string,
  ) =>
    watches.cache.list(kind, namespace).map((item) => key(item.metadata!.namespace!, item.metadata!.name!));

  const enqueueAll = async () => {
    const classes = watches.cache
      .list(CLASS_KIND, undefined)
      .map((vmClass) => classKey(vmClass.metadata!.name!));
    const leases = watches.cache
      .list<KubernetesObject & { spec?: { virtualMachineIPAddressRef?: { namespace?: string } } }>(
        LEASE_KIND,
        undefined,
      )
      .filter((lease) => watchesNamespace(lease.spec?.virtualMachineIPAddressRef?.namespace))
      .map((lease) => leaseKey(lease.metadata!.name!));
    const keys = [
      ...keysOf(KIND, vmKey),
      ...keysOf(OPERATION_KIND, operationKey),
      ...keysOf(IMAGE_KIND, imageKey),
      ...keysOf(SNAPSHOT_KIND, snapshotKey),
      ...keysOf(RESTORE_KIND, restoreKey),
      ...keysOf(CLONE_KIND, cloneKey),
      ...keysOf(EXPORT_KIND, exportKey),
      ...keysOf(SCHEDULE_KIND, scheduleKey),
      ...keysOf(IP_ADDRESS_KIND, ipAddressKey),
      ...classes,
      ...leases,
    ];
    await queue.addMany(keys, { event: { type: 'RESYNC' } });
    logger.info({ keys: keys.length }, 'resync enqueued all VMs and operations');
  };

  // Served first: a manager waiting for Redis (or the apiserver) is alive, just not ready.
  let ready = false;
  const endpoints = await serveHttpEndpoints(options.metricsPort, options.metricsHost, registry, () => ready);
  // Before the caches fill (they enqueue every VM): replicas of an older configuration stop taking keys.
  const configuration = await claimConfiguration({
    redis,
    digest: configurationDigest(ReconcileSettings.parse(options)),
    logger,
  });
  /** What a runner's write may report on: a VM or an image the caches have. */
  const knownByRunners = (key: string) => {
    const named = /^(vm|image):([a-z0-9-]+)\/(.+)$/.exec(key);
    return (
      !!named && watches.cache.get(named[1] === 'vm' ? KIND : IMAGE_KIND, named[2]!, named[3]!) !== undefined
    );
  };
  // The managers follow the writes of the keys the runners may write: both follow the pods (a
  // namespace's changes of one moment taken together).
  await ensureSnapshotNotifications(redis);
  const snapshotWrites = followSnapshotWrites({
    subscriber: connectRedis(options.redisUrl, { maxRetriesPerRequest: null }),
    redis,
    keysOf: (namespace) => {
      const keys = runnerKeys(namespace);
      return [...keys.runner, ...keys.importer];
    },
    known: knownByRunners,
    enqueue: (keys) => queue.addMany(keys, { event: { type: 'SNAPSHOT_WRITTEN' } }),
    missed: () =>
      queue.addMany([...keysOf(KIND, vmKey), ...keysOf(IMAGE_KIND, imageKey)], { event: { type: 'RESYNC' } }),
    // Redis has no rate limit of its own: a namespace whose credential floods it is cut off.
    flooded: (namespace) =>
      void tenantUsers
        ?.suspend(namespace, FLOOD_SUSPEND_MS)
        .catch((err: Error) =>
          logger.warn({ namespace, reason: err.message }, 'suspending a namespace failed'),
        ),
    logger,
  });
  const podsChanged = new Set<string>();
  const followPods = () => {
    const namespaces = [...podsChanged];
    podsChanged.clear();
    for (const namespace of namespaces)
      void Promise.all([tenantUsers?.refresh(namespace), snapshotWrites.refresh(namespace)]).catch(
        (err: Error) =>
          logger.warn({ namespace, reason: err.message }, "following a namespace's runner Redis keys failed"),
      );
  };
  const stopFollowingPods = watches.onChange((kind, namespace) => {
    if (kind !== 'Pod') return;
    if (podsChanged.size === 0) setTimeout(followPods, POD_CHANGES_MS);
    podsChanged.add(namespace);
  });
  // The caches first: a reconcile on an empty cache would find nothing to do.
  await watches.start();
  const workers = await startWorkers({
    redisUrl: options.redisUrl,
    handler,
    concurrency: options.concurrency,
    ...(options.rateLimitPerSecond && { rateLimit: { perSecond: options.rateLimitPerSecond } }),
    resync: { everyMs: options.resyncIntervalMs, onResync: enqueueAll },
    ...KEY_LOCK,
    logger,
    metrics: registry,
  });
  configuration.onChange((current) => {
    if (!current) return void workers.pause();
    // Taken over (the newer configuration's replicas are gone): every key by this configuration.
    workers.resume();
    void enqueueAll().catch(() => undefined);
  });
  if (!configuration.current) await workers.pause();
  // Keys an old replica took before it saw this configuration: once more, after it stopped taking them.
  const afterUpgrade = configuration.replacedAnother
    ? setTimeout(() => void enqueueAll().catch(() => undefined), 3 * CONFIGURATION_CLAIM_TIMING.pollMs)
    : undefined;

  const web =
    options.web &&
    (await startWebServer({
      options: options.web,
      kubeConfig,
      clients,
      cache: watches.cache,
      subscribe: watches.onChange,
      redis,
      lock: redisPoolLock(redis),
      recordEvent: eventRecorder(clients, logger, () => new Date()),
      logger,
    }));

  ready = true;
  logger.info(
    { namespaces: namespaces ?? 'all', metricsPort: endpoints.port, webPort: web?.port },
    'manager started',
  );

  return {
    metricsPort: endpoints.port,
    ...(web && { webPort: web.port }),
    async stop() {
      ready = false;
      clearTimeout(afterUpgrade);
      configuration.stop();
      await web?.close();
      await watches.stop();
      stopFollowingPods();
      await snapshotWrites.stop();
      await workers.close();
      await queue.close();
      redis.disconnect();
      await endpoints.close();
      logger.info('manager stopped');
    },
  };
}
