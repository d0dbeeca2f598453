// The idempotent reconcile of one VirtualMachine key: read what is, apply what should be, report.
import {
  PatchStrategy,
  type KubernetesObject,
  type V1ConfigMap,
  type V1PersistentVolumeClaim,
  type V1StorageClass,
  type V1Node,
  type V1Pod,
  type V1PodDisruptionBudget,
  type V1Secret,
  type V1Service,
  type V1ServiceAccount,
  type V1StatefulSet,
} from '@kubernetes/client-node';
import { setTimeout as sleep } from 'node:timers/promises';
import { isDeepStrictEqual } from 'node:util';
import {
  KIND,
  VirtualMachine,
  type EvictionStrategy,
  type VirtualMachineStatus,
} from '../../api/virtual-machine.js';
import { trimForCache, type ObjectCache } from '../../kube/object-cache.js';
import type { RunnerSnapshot } from '../../api/runner-snapshot.js';
import type { ImportProgress } from '../../api/import-progress.js';
import { IMAGE_KIND, VirtualMachineImage } from '../../api/virtual-machine-image.js';
import { TerminalError, type HandlerResult } from '../../queue/index.js';
import {
  apiserverRejection,
  deletePodByUid,
  isConflict,
  isNotFound,
  readOptional,
  type KubeClients,
} from '../../kube/clients.js';
import { isSubset } from '../../kube/subset.js';
import { statusPatch, mergePatch } from '../../kube/merge-patch.js';
import { eventObjectOf, eventRecorder, type ObjectEvent } from '../events.js';
import type { Logger } from '../../util/logger.js';
import { desiredConfigMap } from './config-map.js';
import { nudgeDecision } from './config-nudge.js';
import {
  chooseDisplaySecret,
  generatedDisplaySecret,
  wantsGeneratedDisplaySecret,
} from './display-secret.js';
import { automaticRestart } from '../virtual-machine-operation/operations.js';
import {
  OPERATION_KIND,
  VirtualMachineOperation,
  operationApiRef,
} from '../../api/virtual-machine-operation.js';
import {
  CONFIG_VERSION_ANNOTATION,
  OPERATION_ANNOTATION,
  FIELD_MANAGER,
  IMAGE_REPOSITORY_CLAIM,
  APP_NAME,
  LABEL_INSTANCE,
  LABEL_VOLUME,
  LABEL_NAME,
  displaySecretLabels,
  parseVmKey,
  vmApiRef,
  vmKey,
} from './naming.js';
import { desiredRunnerConfig, maximumCpus, renderRunnerConfig } from './runner-config.js';
import {
  RUNNER_SERVICE_ACCOUNT,
  desiredRunnerSecret,
  desiredRunnerServiceAccount,
  RUNNER_SECRET,
} from './runner-identity.js';
import {
  desiredRunnerPod,
  migrationSecretName,
  stopGraceSeconds,
  type Overcommit,
  type RunnerImage,
} from './runner-pod.js';
import { runnerClaims } from './runner-claims.js';
import { planDiskSizes } from './disk-sizes.js';
import { planRunnerPods } from './runner-pods.js';
import { canTakeVms, nodeFacts, type NodeFacts } from './node-facts.js';
import { migratability } from './migration/migratable.js';
import { planMigration } from './migration/plan.js';
import { readVmMigrationRequest } from './migration/request.js';
import { snapshotSuffixOfPod } from './migration/target.js';
import { carryOutMigration } from './migration/writes.js';
import { disruptionBudget, evacuation, planEviction } from './migration/eviction.js';
import {
  adoptRunnerPod,
  createClaims,
  createRunnerPod,
  isOwnedBy,
  retireStatefulSet,
} from './runner-pod-writes.js';
import { planDiskImports } from './disk-imports.js';
import {
  claimWait,
  claimWaitMessage,
  defaultStorageClass,
  type ClaimWait,
  type StorageClasses,
} from './claim-binding.js';
import { carryOutImports } from './disk-import-writes.js';
import { desiredImporterPod, isImporterPod } from './importer-pod.js';
import { isAttachPod } from './attach-pod.js';
import { attachmentEvents, planDiskAttachments, withAttachments } from './disk-attachments.js';
import { carryOutAttachments } from './disk-attachment-writes.js';
import { desiredLoadBalancerService, type LoadBalancerDefaults } from './load-balancer-service.js';
import { policyStop } from './run-policy.js';
import { startRetryInMs } from './start-backoff.js';
import { provisioningSecretErrors, provisioningSecretNames } from './provisioning-secrets.js';
import {
  LOAD_BALANCER_CONDITION,
  currentSnapshot,
  deriveStatus,
  hasCondition,
  rejectionMessage,
  serviceNameTaken,
  transitionEvents,
  type LoadBalancerState,
} from './status.js';
import { POOL_KIND, VmPool } from '../../api/vm-pool.js';
import { consoleInUse, heldAssignment, withAssignment } from '../../pools/assignment.js';

export interface VmReconcilerOptions {
  clients: KubeClients;
  /** The watches' caches: every read but of a VM's provisioning Secrets comes from here. */
  cache: ObjectCache;
  /** The newest generation of the VM any replica has seen (generation-marks.ts); 0 when unknown. */
  newestGeneration?: (key: string, uid: string) => Promise<number>;
  defaultRunnerImage: RunnerImage;
  /** The Redis URL (with the runner's credential) runners publish to; it goes into each namespace's runner Secret. */
  runnerRedisUrl: string;
  overcommit?: Overcommit;
  /** The StorageClass of new runner data claims; the default one when undefined. */
  runnerDataStorageClass?: string;
  /** What an eviction does to a VM without spec.evictionStrategy (default LiveMigrateIfPossible). */
  evictionStrategy?: EvictionStrategy;
  /** The access mode of new runner data claims (ReadWriteMany lets VMs migrate). */
  runnerDataAccessMode?: 'ReadWriteOnce' | 'ReadWriteMany';
  /** The manager's LoadBalancer Service setting (default: none unless a VM asks for one). */
  loadBalancer?: LoadBalancerDefaults;
  /** Nudge kubelet to refresh a changed config volume at once (default); off only to measure kubelet's own sync. */
  configNudge?: boolean;
  /** The runner's latest snapshot of a VM key (from Redis; a migration target's: `suffix`), if any. */
  readSnapshot?: (key: string, suffix?: string) => Promise<RunnerSnapshot | undefined>;
  /** The latest progress of a disk's import (from Redis), if any. */
  readImportProgress?: (key: string, volume: string) => Promise<ImportProgress | undefined>;
  logger: Logger;
  now?: () => Date;
}

const SECRET_RECHECK_MS = 15_000;
/** How long a reconcile waits for a cache behind a seen change, and when it tries again. */
const STALE_CACHE = { waitMs: 1_000, pollMs: 10, retryMs: 500, attempts: 3 };
/** A status write refused for an older resourceVersion: reconcile again on the newer VM. */
const STATUS_CONFLICT = Symbol('status conflict');
/** How long vmop's own last write of a VM stands in for the cache, which has it by then. */
const OWN_WRITE_TTL_MS = 5_000;

/**
 * resourceVersions from etcd are increasing integers; relied on only to prefer vmop's own newer
 * write of a VM to its cached copy, or to wait for the cache after a refused write.
 */
type Versioned = { metadata?: { resourceVersion?: string } } | undefined;
const isNewer = (a: Versioned, b: Versioned) =>
  Number(a?.metadata?.resourceVersion) > Number(b?.metadata?.resourceVersion);

/** Spec problems the CRD schema cannot express; reported in the SpecValid condition. */
function semanticErrors(vm: VirtualMachine): string[] {
  const errors: string[] = [];
  const { currentCpus } = vm.spec.vm;
  const maximum = maximumCpus(vm.spec.vm);
  if (currentCpus !== undefined && currentCpus > maximum) {
    errors.push(`spec.vm.currentCpus: ${currentCpus} exceeds the ${maximum} CPUs of spec.vm.cpuTopology`);
  }
  return errors;
}

export function createVmReconciler(options: VmReconcilerOptions) {
  const { clients, cache, logger } = options;
  const now = options.now ?? (() => new Date());

  /**
   * The VMs as this replica last wrote them (the status patch's answer), until its watch brings
   * them: the next reconcile, e.g. for the runner's next snapshot, must not start from before it.
   */
  const ownWrites = new Map<string, KubernetesObject>();
  function rememberOwnWrite(key: string, vm: KubernetesObject) {
    ownWrites.set(key, vm);
    setTimeout(() => ownWrites.get(key) === vm && ownWrites.delete(key), OWN_WRITE_TTL_MS).unref();
  }

  /** The VM: vmop's own write while the cache is older, else the cached one. */
  function cachedVm(key: string, namespace: string, name: string): KubernetesObject | undefined {
    const cached = cache.get<KubernetesObject>(KIND, namespace, name);
    const own = ownWrites.get(key);
    if (own && own.metadata?.uid === cached?.metadata?.uid && isNewer(own, cached)) return own;
    return cached;
  }

  function cachedStorageClasses(): StorageClasses {
    return {
      byName: (className) => cache.get<V1StorageClass>('StorageClass', '', className),
      byDefault: () => defaultStorageClass(cache.list<V1StorageClass>('StorageClass', undefined)),
    };
  }

  /** The pool the VM is assigned from, if it (still) exists. */
  function assignedPool(vm: VirtualMachine): VmPool | undefined {
    const pool = vm.status?.assignment?.pool;
    const cached = pool && cache.get<KubernetesObject>(POOL_KIND, vm.metadata.namespace!, pool);
    return cached ? VmPool.safeParse(cached).data : undefined;
  }

  /** The cached VM, once the cache has the newest spec generation any replica has seen. */
  async function freshVm(key: string, namespace: string, name: string) {
    const cached = () => cachedVm(key, namespace, name);
    let raw = cached();
    const uid = raw?.metadata?.uid;
    if (!raw || !uid || !options.newestGeneration) return { raw };
    const newest = await options.newestGeneration(key, uid);
    for (let waited = 0; (raw?.metadata?.generation ?? 0) < newest; waited += STALE_CACHE.pollMs) {
      if (waited >= STALE_CACHE.waitMs) return { raw: undefined, stale: true };
      await sleep(STALE_CACHE.pollMs);
      raw = cached();
    }
    return { raw };
  }

  /** Server-side applies `object` unless `current` has it already; returns the applied object, if written. */
  async function apply<T extends KubernetesObject>(
    object: T,
    current: T | undefined,
  ): Promise<T | undefined> {
    if (current && isSubset(object, current)) return undefined;
    return (await clients.objects.patch(
      object,
      undefined,
      undefined,
      FIELD_MANAGER,
      true,
      PatchStrategy.ServerSideApply,
    )) as T;
  }

  /**
   * apply() for an object of the namespace that all its VMs need: reconciles of many new VMs at
   * once, before the watch has it, write it once (per replica), not once each.
   */
  const sharedApplies = new Map<string, Promise<KubernetesObject | undefined>>();
  function applyShared<T extends KubernetesObject>(object: T, current: T | undefined) {
    if (current && isSubset(object, current)) return Promise.resolve(undefined);
    const id = `${object.kind}/${object.metadata!.namespace}/${object.metadata!.name}`;
    const pending = sharedApplies.get(id);
    if (pending) return pending.then(() => undefined); // written by the reconcile that started it
    const applying = apply(object, undefined).finally(() => sharedApplies.delete(id));
    sharedApplies.set(id, applying);
    return applying;
  }

  /** Creates an operation; false when it exists already (made by an earlier reconcile or another replica). */
  async function createOperation(operation: VirtualMachineOperation): Promise<boolean> {
    try {
      await clients.customObjects.createNamespacedCustomObject({
        ...operationApiRef(operation.metadata.namespace!),
        body: operation,
      });
      return true;
    } catch (err) {
      if (isConflict(err)) return false;
      throw err;
    }
  }

  /** Applies a nudge decision (see config-nudge.ts). */
  async function nudgeRunnerPod(pod: V1Pod, annotations: Record<string, string>): Promise<void> {
    await clients.core.patchNamespacedPod(
      { name: pod.metadata!.name!, namespace: pod.metadata!.namespace!, body: { metadata: { annotations } } },
      mergePatch,
    );
  }

  /**
   * Creates the VM's locked display Secret; undefined when it exists already (another replica
   * made it, and this one's cache has not got it yet: the watch brings it and the key back).
   */
  async function createGeneratedDisplaySecret(vm: VirtualMachine): Promise<V1Secret | undefined> {
    try {
      return await clients.core.createNamespacedSecret({
        namespace: vm.metadata.namespace!,
        body: generatedDisplaySecret(vm),
      });
    } catch (err) {
      if (isConflict(err)) return undefined;
      throw err;
    }
  }

  const record = eventRecorder(clients, logger, now);
  const recordEvent = (vm: VirtualMachine, event: ObjectEvent) => record(eventObjectOf(vm), event);

  /**
   * Where the VM's live migration stands and what to do next (migration/plan.ts), with the snapshot
   * of the pod that runs the guest (the target's, once it took over).
   */
  async function planVmMigration(
    vm: VirtualMachine,
    pods: V1Pod[],
    claims: V1PersistentVolumeClaim[],
    current: V1Pod | undefined,
    snapshot: RunnerSnapshot | undefined,
    node: (name: string) => NodeFacts,
  ) {
    const key = vmKey(vm.metadata.namespace!, vm.metadata.name);
    const sourceSnapshot = currentSnapshot(snapshot, current, vm.status);
    const state = vm.status?.migrationState;
    const target = state?.targetPod ? pods.find((pod) => pod.metadata?.name === state.targetPod) : undefined;
    const targetSnapshot =
      target && !state?.result
        ? currentSnapshot(await options.readSnapshot?.(key, snapshotSuffixOfPod(target)), target, undefined)
        : undefined;
    const migratable = migratability(vm, current, claims);
    const plan = planMigration({
      vm,
      request: readVmMigrationRequest(vm.metadata.annotations),
      pods,
      claims,
      current,
      sourceSnapshot,
      targetSnapshot,
      migratable,
      node,
      now: now(),
    });
    return { plan, migratable, snapshot: plan.switchTo ? targetSnapshot : snapshot };
  }

  /** The progress the running importer pods sent, by volume. */
  async function readImportProgress(key: string, importerPods: V1Pod[]) {
    const progress = new Map<string, ImportProgress>();
    for (const pod of importerPods) {
      const volume = pod.metadata?.labels?.[LABEL_VOLUME];
      if (!volume || pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed') continue;
      const sent = await options.readImportProgress?.(key, volume);
      if (sent) progress.set(volume, sent);
    }
    return progress;
  }

  return async function reconcileVirtualMachine(key: string): Promise<HandlerResult> {
    for (let attempt = 1; ; attempt++) {
      const result = await reconcileOnce(key);
      if (result !== STATUS_CONFLICT) return result;
      if (attempt >= STALE_CACHE.attempts) return { requeueAfter: STALE_CACHE.retryMs };
    }
  };

  async function reconcileOnce(key: string): Promise<HandlerResult | typeof STATUS_CONFLICT> {
    const { namespace, name } = parseVmKey(key);
    // Read at once, beside freshVm's Redis read rather than after it (one round trip less to wait).
    // The runner of the pod the VM's status names (a migration's target publishes under its own key).
    const named = (cachedVm(key, namespace, name) as VirtualMachine | undefined)?.status?.runnerPod?.name;
    const suffix = snapshotSuffixOfPod(named ? cache.get<V1Pod>('Pod', namespace, named) : undefined);
    const snapshotRead = options.readSnapshot?.(key, suffix) ?? Promise.resolve(undefined);
    snapshotRead.catch(() => undefined); // awaited below, unless the reconcile ends before
    const { raw, stale } = await freshVm(key, namespace, name);
    if (stale) {
      logger.info({ key }, 'the cached VM is older than a seen change; trying again');
      return { requeueAfter: STALE_CACHE.retryMs };
    }
    // Not cached: gone, or not seen yet (its watch event brings the key back).
    if (!raw || raw.metadata?.deletionTimestamp) return; // owned objects go by garbage collection
    const vm = VirtualMachine.parse(raw); // a copy: cached objects are never changed

    const writes: string[] = [];
    let rejected: string | undefined;
    let displaySecret = chooseDisplaySecret(
      cache.list<V1Secret>('Secret', namespace, displaySecretLabels(name)),
    );
    if (!displaySecret && wantsGeneratedDisplaySecret(vm)) {
      try {
        displaySecret = await createGeneratedDisplaySecret(vm);
        if (!displaySecret) {
          logger.debug({ key }, 'the display Secret exists but is not cached yet; trying again');
          return { requeueAfter: STALE_CACHE.retryMs };
        }
        writes.push('display Secret (generated, locked)');
      } catch (err) {
        rejected = apiserverRejection(err);
        if (rejected === undefined) throw err;
      }
    }
    const displaySecretName = displaySecret?.metadata?.name;
    // The VM's runner pods, whatever their names (two during a migration, `<vm>-0` of vmop 0.1).
    const vmPods = { [LABEL_NAME]: APP_NAME, [LABEL_INSTANCE]: name };
    const vmClaims = cache.list<V1PersistentVolumeClaim>('PersistentVolumeClaim', namespace, vmPods);
    const claims = runnerClaims(vm, vmClaims, {
      runnerDataStorageClass: options.runnerDataStorageClass,
      runnerDataAccessMode: options.runnerDataAccessMode,
    });
    const storageClasses = cachedStorageClasses();
    const diskSizes = planDiskSizes(claims, vmClaims, storageClasses.byName);
    const waitForClaim = (claim: V1PersistentVolumeClaim) => claimWait(claim, true, storageClasses);
    // The user's Secrets carry no vmop label, so they are not cached: read when referenced.
    const readSecret = (secretName: string | undefined) =>
      secretName
        ? readOptional(() => clients.core.readNamespacedSecret({ name: secretName, namespace })).then(
            (secret) => secret ?? null,
          )
        : undefined;
    const secretNames = provisioningSecretNames(vm);
    const secretErrors = provisioningSecretErrors(vm, {
      cloudInit: await readSecret(secretNames.cloudInit),
      sysprep: await readSecret(secretNames.sysprep),
    });

    // Secrets are not watched: look again for one that is missing or incomplete.
    let requeueAfter: number | undefined = secretErrors.length > 0 ? SECRET_RECHECK_MS : undefined;
    /** Whether the VM's LoadBalancer Service is in place, when it wants one. */
    let loadBalancer: LoadBalancerState | undefined;
    const vmPodsCached = cache.list<V1Pod>('Pod', namespace, vmPods);
    const runnerPods = vmPodsCached.filter((pod) => !isImporterPod(pod) && !isAttachPod(pod));
    const importerPods = vmPodsCached.filter(isImporterPod);
    const imports = planDiskImports({
      vm,
      images: (imageName) => {
        const cached = cache.get<KubernetesObject>(IMAGE_KIND, namespace, imageName);
        return cached && VirtualMachineImage.safeParse(cached).data;
      },
      claims,
      existing: vmClaims,
      importerPods,
      progress: await readImportProgress(key, importerPods),
      claimWait: waitForClaim,
    });
    diskSizes.statuses = diskSizes.statuses.map((disk) => {
      const imported = imports.statuses.get(disk.name);
      return imported ? { name: disk.name, claim: disk.claim, ...imported } : disk;
    });
    const node = (nodeName: string) => nodeFacts(nodeName, cache.get<V1Node>('Node', '', nodeName));
    let podPlan = planRunnerPods({ vm, pods: runnerPods, node });
    if (podPlan.verify) {
      // The status names a pod the cache lacks: just made (the cache lags, briefly) or gone? Wait
      // a little for the cache, then the apiserver says.
      const named = podPlan.verify;
      for (let waited = 0; waited < STALE_CACHE.waitMs; waited += STALE_CACHE.pollMs) {
        await sleep(STALE_CACHE.pollMs);
        if (cache.get('Pod', namespace, named)) return { requeueAfter: 0 };
      }
      if (await readOptional(() => clients.core.readNamespacedPod({ name: named, namespace })))
        return { requeueAfter: STALE_CACHE.retryMs };
      podPlan = planRunnerPods({ vm, pods: runnerPods, node, absent: new Set([named]) });
    }
    // A runner pod waits for its claims, made first and then bound (claim-binding.ts), and for its
    // disks' imports: it never boots a half-written disk.
    const claimsToMake = podPlan.create
      ? claims.filter((claim) => !claim.exists && !imports.createClaims.includes(claim))
      : [];
    const claimWaits: ClaimWait[] = podPlan.create
      ? claims.flatMap((claim) => {
          const made = vmClaims.find((c) => c.metadata?.name === claim.claimName);
          return (made ? waitForClaim(made) : claimWait(claim.desired, false, storageClasses)) ?? [];
        })
      : [];
    const waiting =
      imports.waiting ??
      (claimWaits.length > 0
        ? { reason: 'WaitingForVolumeBinding', message: claimWaitMessage('the runner pod', claimWaits) }
        : undefined);
    if (waiting) podPlan = { ...podPlan, create: undefined };
    let pod = podPlan.current;
    const migration = await planVmMigration(vm, runnerPods, vmClaims, pod, await snapshotRead, node);
    if (migration.plan.switchTo) pod = migration.plan.switchTo;
    const podSnapshot = migration.snapshot;
    const attachments = planDiskAttachments({
      claims,
      existing: vmClaims,
      pod,
      attachPods: vmPodsCached.filter(isAttachPod),
      snapshot: currentSnapshot(podSnapshot, pod, vm.status),
      hasKeySecret: cache.get<V1Secret>('Secret', namespace, migrationSecretName(name)) !== undefined,
    });
    diskSizes.statuses = withAttachments(diskSizes.statuses, attachments, vmClaims);
    const runnerConfig = renderRunnerConfig(
      desiredRunnerConfig(vm, {
        hasDisplaySecret: displaySecretName !== undefined,
        diskSizes: diskSizes.capacities,
        podDisks: attachments.podVolumes,
        hotplugDisks: attachments.config,
      }),
    );
    const specErrors = [...semanticErrors(vm), ...runnerConfig.errors, ...secretErrors];
    const imageRepository = cache.get<V1PersistentVolumeClaim>(
      'PersistentVolumeClaim',
      namespace,
      IMAGE_REPOSITORY_CLAIM,
    );
    const configMap = desiredConfigMap(vm, runnerConfig.yaml);
    const desiredConfig = runnerConfig.digest;
    /** The ConfigMap, runner Secret and ServiceAccount; the config nudge; stopping and adopting pods. */
    const applyOwnedObjects = async (): Promise<HandlerResult> => {
      const currentConfigMap = cache.get<V1ConfigMap>('ConfigMap', namespace, name);
      // Runtime changes wait for a migration: both runners read the one config.
      if (!migration.plan.migrating) {
        const appliedConfigMap = await apply(configMap, currentConfigMap);
        if (appliedConfigMap) writes.push('ConfigMap');
        const configMapVersion = (appliedConfigMap ?? currentConfigMap)?.metadata?.resourceVersion ?? '';
        if (options.configNudge !== false && pod) {
          const nudge = nudgeDecision({
            pod,
            configVersion: [configMapVersion, displaySecret?.metadata?.resourceVersion]
              .filter(Boolean)
              .join('/'),
            configDigest: desiredConfig,
            snapshot: podSnapshot,
            now: now(),
          });
          if (nudge.annotations) {
            await nudgeRunnerPod(pod, nudge.annotations);
            writes.push(`Pod annotation (config ${nudge.annotations[CONFIG_VERSION_ANNOTATION]})`);
          }
          requeueAfter = nudge.retryAfterMs;
        }
      }

      const currentSecret = cache.get<V1Secret>('Secret', namespace, RUNNER_SECRET);
      if (await applyShared(desiredRunnerSecret(namespace, options.runnerRedisUrl), currentSecret))
        writes.push('runner Secret');
      const currentServiceAccount = cache.get<V1ServiceAccount>(
        'ServiceAccount',
        namespace,
        RUNNER_SERVICE_ACCOUNT,
      );
      if (await applyShared(desiredRunnerServiceAccount(namespace), currentServiceAccount))
        writes.push('ServiceAccount');

      // vmop 0.1 ran VMs from a StatefulSet: it goes, its pod stays and is adopted (no restart).
      const legacy = cache.get<V1StatefulSet>('StatefulSet', namespace, name);
      if (legacy && !legacy.metadata?.deletionTimestamp) {
        await retireStatefulSet(clients, legacy);
        writes.push('StatefulSet (deleted; its pod is kept)');
      }
      if (legacy) podPlan = { ...podPlan, create: undefined }; // it must be gone before a pod is made
      if (pod && !pod.metadata?.deletionTimestamp && !isOwnedBy(pod, vm)) {
        await adoptRunnerPod(clients, pod, vm);
        writes.push(`Pod ${pod.metadata!.name} (adopted)`);
      }
      for (const lost of podPlan.forget ?? []) {
        // Its node is gone for sure (deleted, or down and out of service): nothing of it runs.
        const { name: podName, uid, namespace: podNamespace } = lost.metadata!;
        const forgotten = { name: podName!, namespace: podNamespace!, uid: uid! };
        if (await deletePodByUid(clients.core, forgotten, { gracePeriodSeconds: 0 }))
          writes.push(`Pod ${podName} removed (its node ${lost.spec?.nodeName} is gone)`);
      }
      const operation = cachedOperation(vm.metadata.annotations?.[OPERATION_ANNOTATION]);
      for (const stale of podPlan.stop) {
        // powerdownTimeout as it is now (it may have changed since the pod was made), unless forced.
        const { name: podName, uid } = stale.metadata!;
        const options = { gracePeriodSeconds: stopGraceSeconds(vm, operation) };
        if (await deletePodByUid(clients.core, { name: podName!, namespace, uid: uid! }, options))
          writes.push(`Pod ${podName} deleted (stop)`);
      }
      writes.push(
        ...(await carryOutImports(clients, namespace, imports, {
          importerPod: (disk) => desiredImporterPod(vm, disk, options.defaultRunnerImage),
          recordEvent: (event) => recordEvent(vm, event),
        })),
      );
      writes.push(...(await createClaims(clients, namespace, claimsToMake)));
      writes.push(...(await carryOutAttachments(clients, vm, attachments, options.defaultRunnerImage)));
      for (const { claim, storage } of diskSizes.expand) {
        await expandClaim(claim, storage);
        writes.push(`PersistentVolumeClaim ${claim} (grows to ${storage})`);
      }
      await reconcileLoadBalancer(vm);
      await reconcileEviction();
    };

    /** An operation of the VM's namespace from the cache, when it is there and valid. */
    function cachedOperation(opName: string | undefined): VirtualMachineOperation | undefined {
      const cached = opName ? cache.get(OPERATION_KIND, namespace, opName) : undefined;
      return cached && VirtualMachineOperation.safeParse(cached).data;
    }

    /** The VM's disruption budget, and its evacuation when its node is cordoned (migration/eviction.ts). */
    async function reconcileEviction(): Promise<void> {
      const evacuating = cachedOperation(pod?.metadata?.uid ? evacuation(vm, pod).metadata.name : undefined);
      const eviction = planEviction({
        vm,
        pod,
        node: pod?.spec?.nodeName ? node(pod.spec.nodeName) : undefined,
        migratable: migration.migratable,
        defaultStrategy: options.evictionStrategy ?? 'LiveMigrateIfPossible',
        evacuation: evacuating,
        migrating: migration.plan.migrating,
        otherNodeReady: cache
          .list<V1Node>('Node', undefined)
          .map((other) => nodeFacts(other.metadata!.name!, other))
          .some((other) => canTakeVms(other, pod?.spec?.nodeName)),
      });
      const budget = cache.get<V1PodDisruptionBudget>('PodDisruptionBudget', namespace, name);
      if (eviction.budget && !budget) {
        await apply(disruptionBudget(vm), undefined);
        writes.push('PodDisruptionBudget');
      } else if (!eviction.budget && budget) {
        await clients.objects.delete(disruptionBudget(vm)).catch((err: unknown) => {
          if (!isNotFound(err)) throw err;
        });
        writes.push('PodDisruptionBudget (deleted)');
      }
      if (eviction.evacuate && (await createOperation(eviction.evacuate))) {
        writes.push(`VirtualMachineOperation ${eviction.evacuate.metadata.name} (its node is cordoned)`);
        await recordEvent(vm, {
          type: 'Normal',
          reason: 'Evacuating',
          message: `node ${pod?.spec?.nodeName} is cordoned: moving the VM live to another node`,
        });
      }
    }

    /** Asks for more room on a disk's claim (its StorageClass allows it: disk-sizes.ts). */
    async function expandClaim(claim: string, storage: string): Promise<void> {
      await clients.core.patchNamespacedPersistentVolumeClaim(
        { name: claim, namespace, body: { spec: { resources: { requests: { storage } } } } },
        mergePatch,
      );
    }

    /** Makes the runner pod the status names, and the claims it needs that do not exist yet. */
    async function makeRunnerPod(podName: string): Promise<void> {
      const made = await createRunnerPod(
        clients,
        claims,
        desiredRunnerPod(vm, {
          name: podName,
          claims,
          defaultRunnerImage: options.defaultRunnerImage,
          displaySecretName,
          hasImageRepository: imageRepository !== undefined && !imageRepository.metadata?.deletionTimestamp,
          overcommit: options.overcommit,
        }),
      );
      writes.push(...made);
    }

    async function reconcileLoadBalancer(vm: VirtualMachine): Promise<void> {
      const desired = desiredLoadBalancerService(vm, options.loadBalancer ?? { enabled: false });
      // Only Services with vmop's labels are cached: before creating one, look for a foreign one.
      const current =
        cache.get<V1Service>('Service', namespace, name) ??
        (desired
          ? await readOptional(() => clients.core.readNamespacedService({ name, namespace }))
          : undefined);
      const ours = current?.metadata?.ownerReferences?.some((ref) => ref.uid === vm.metadata.uid);
      if (!desired) {
        if (!current || !ours) return;
        await clients.core.deleteNamespacedService({ name, namespace }).catch((err: unknown) => {
          if (!isNotFound(err)) throw err;
        });
        writes.push('Service (deleted)');
        return;
      }
      if (current && !ours) {
        // Someone else's: never taken over. Foreign Services are not watched, so look again later.
        loadBalancer = { ready: false, message: serviceNameTaken(namespace, name) };
        requeueAfter = Math.min(requeueAfter ?? SECRET_RECHECK_MS, SECRET_RECHECK_MS);
        return;
      }
      loadBalancer = { ready: true };
      // Exact metadata: a label or annotation taken out of the spec goes (server-side apply drops it).
      const sameMetadata =
        current &&
        isDeepStrictEqual(current.metadata?.labels ?? {}, desired.metadata!.labels) &&
        isDeepStrictEqual(current.metadata?.annotations ?? {}, desired.metadata!.annotations);
      if (sameMetadata && isSubset(desired, current)) return;
      await apply(desired, undefined);
      writes.push('Service');
    }

    if (specErrors.length === 0 && rejected === undefined) {
      try {
        const early = await applyOwnedObjects();
        if (early) return early;
      } catch (err) {
        rejected = apiserverRejection(err);
        if (rejected === undefined) throw err;
      }
    }

    const snapshot = podSnapshot;
    const observed = {
      pod,
      snapshot,
      specErrors,
      rejected,
      loadBalancer,
      configDigest: desiredConfig,
      creatingPod: podPlan.create,
      node: pod?.spec?.nodeName ? node(pod.spec.nodeName) : undefined,
      migration: {
        state: migration.plan.state ?? vm.status?.migrationState,
        migrating: migration.plan.migrating,
        migratable: migration.migratable,
      },
      disks: diskSizes,
      waiting,
      now: now(),
    };
    const derived = deriveStatus(vm, observed);
    const held = heldAssignment(vm, assignedPool(vm), consoleInUse({ status: derived }), observed.now);
    let status = withAssignment(derived, held.assignment);
    let resourceVersion = vm.metadata.resourceVersion;
    let statusBefore = vm.status;
    /** Writes `next` unless unchanged (or `force`); false when the VM changed meanwhile. */
    const writeStatus = async (next: VirtualMachineStatus, force = false): Promise<boolean> => {
      if (!force && isDeepStrictEqual(JSON.parse(JSON.stringify(next)), statusBefore ?? {})) return true;
      // Guarded: a status derived from a cached VM older than the apiserver's is refused.
      const body = { metadata: { resourceVersion }, status: statusPatch(statusBefore, next) };
      let written: KubernetesObject;
      try {
        written = (await clients.customObjects.patchNamespacedCustomObjectStatus(
          { ...vmApiRef(namespace, name), body },
          mergePatch,
        )) as KubernetesObject;
      } catch (err) {
        if (!isConflict(err)) throw err;
        logger.debug({ key }, 'the VM changed meanwhile; reconciling again once the cache has it');
        for (let waited = 0; waited < STALE_CACHE.waitMs; waited += STALE_CACHE.pollMs) {
          if (isNewer(cachedVm(key, namespace, name), vm)) break;
          await sleep(STALE_CACHE.pollMs);
        }
        return false;
      }
      trimForCache(written);
      rememberOwnWrite(key, written);
      resourceVersion = written.metadata?.resourceVersion;
      writes.push('status');
      for (const event of transitionEvents(statusBefore, next, vm.spec.vm.state))
        await recordEvent(vm, event);
      for (const event of attachmentEvents(statusBefore?.disks, next.disks)) await recordEvent(vm, event);
      statusBefore = next;
      return true;
    };
    const stop = policyStop(vm, { pod, snapshot: currentSnapshot(snapshot, pod, vm.status), status });
    const creating =
      podPlan.create !== undefined && !stop && specErrors.length === 0 && rejected === undefined;
    // Before a pod is made the status must name it, in a write the VM's resourceVersion guards
    // (made even when nothing else changed): a replica with an older VM is refused, not doubled.
    // So must a migration's every step: two replicas never make two targets or switch twice.
    const migrationStep = migration.plan.state !== undefined;
    if (!(await writeStatus(status, creating || migrationStep))) return STATUS_CONFLICT;
    if (held.released) {
      await recordEvent(vm, { type: 'Normal', reason: 'AssignmentReleased', message: held.released });
      // Logged in for the assignment (loginOnAssignment): logged out with it.
      if (vm.spec.vm.display.loggedInUser === vm.status?.assignment?.user) {
        await clients.customObjects.patchNamespacedCustomObject(
          { ...vmApiRef(namespace, name), body: { spec: { vm: { display: { loggedInUser: null } } } } },
          mergePatch,
        );
        writes.push('spec.vm.display.loggedInUser=null (assignment released)');
      }
    }
    if (held.recheckInMs !== undefined)
      requeueAfter = Math.min(requeueAfter ?? held.recheckInMs, held.recheckInMs);
    if (specErrors.length === 0 && rejected === undefined)
      writes.push(...(await carryOutMigration(clients, cache, vm, migration.plan)));
    if (migration.plan.requeueAfterMs !== undefined)
      requeueAfter = Math.min(requeueAfter ?? migration.plan.requeueAfterMs, migration.plan.requeueAfterMs);
    if (creating) {
      try {
        await makeRunnerPod(podPlan.create!);
      } catch (err) {
        rejected = apiserverRejection(err);
        if (rejected === undefined) throw err;
        // The pod (or a claim) the apiserver refuses: say so now, since nothing retries it.
        status = withAssignment(
          deriveStatus(vm, { ...observed, rejected, creatingPod: undefined }),
          held.assignment,
        );
        if (!(await writeStatus(status))) return STATUS_CONFLICT;
      }
    }
    const ownSnapshot = currentSnapshot(snapshot, pod, vm.status);
    const retryInMs = stop
      ? undefined
      : startRetryInMs(status.startFailure, ownSnapshot, desiredConfig, now());
    if (retryInMs === 0 && pod && !pod.metadata?.deletionTimestamp) {
      // The next reconcile makes a new pod, whose runner tries again.
      const { name: podName, namespace: podNamespace, uid } = pod.metadata!;
      if (await deletePodByUid(clients.core, { name: podName!, namespace: podNamespace!, uid: uid! })) {
        writes.push('Pod deleted (start retry)');
        const failures = status.startFailure?.consecutiveFailCount ?? 0;
        await recordEvent(vm, {
          type: 'Normal',
          reason: 'RetryingStart',
          message:
            failures > 0
              ? `starting the VM again after ${failures} failed start(s) in a row`
              : 'starting the VM again (an operation reset the start back-off)',
        });
      }
    } else if (retryInMs !== undefined && retryInMs > 0) {
      requeueAfter = Math.min(requeueAfter ?? retryInMs, retryInMs);
    }
    if (stop) {
      await clients.customObjects.patchNamespacedCustomObject(
        // Guarded: an operation that claimed the VM since it was read (and so ended the pod) wins.
        {
          ...vmApiRef(namespace, name),
          body: { metadata: { resourceVersion }, spec: { vm: { state: 'Stopped' } } },
        },
        mergePatch,
      );
      writes.push(`spec.vm.state=Stopped (${stop.reason})`);
      const type = stop.reason === 'StoppedByGuest' ? 'Normal' : 'Warning';
      await recordEvent(vm, { type, reason: stop.reason, message: stop.message });
    } else if (wantsAutomaticRestart(vm, status, snapshot, desiredConfig)) {
      const restart = automaticRestart(vm);
      if (await createOperation(restart)) {
        writes.push(`VirtualMachineOperation ${restart.metadata.name} (restartApprovalMode Automatic)`);
        const paths = status.restartAwaitingChanges!.map((c) => c.path).join(', ');
        await recordEvent(vm, {
          type: 'Normal',
          reason: 'RestartToApplyChanges',
          message: `restarting to apply ${paths} (restartApprovalMode Automatic)`,
        });
      }
    }
    // A status write alone is routine (a runner's every snapshot brings one): debug, not info.
    if (writes.length > 0)
      logger[writes.every((write) => write === 'status') ? 'debug' : 'info'](
        { key, writes, phase: status.phase },
        'reconciled',
      );
    if (loadBalancer?.message && !hasCondition(vm.status, LOAD_BALANCER_CONDITION, loadBalancer.message)) {
      await recordEvent(vm, {
        type: 'Warning',
        reason: 'LoadBalancerServiceNameTaken',
        message: loadBalancer.message,
      });
    }
    if (rejected !== undefined) {
      const previous = vm.status?.conditions?.find((c) => c.type === 'SpecValid');
      const message = rejectionMessage(rejected);
      if (!previous?.message.includes(message)) {
        await recordEvent(vm, { type: 'Warning', reason: 'RejectedByApiserver', message });
      }
      throw new TerminalError(message);
    }
    if (requeueAfter !== undefined) return { requeueAfter };
  }
}

/**
 * restartApprovalMode Automatic: the VM runs, changes wait for a restart, its runner has the
 * current config (so the list is not stale, e.g. for an edit already reverted) and no operation
 * is in flight.
 */
function wantsAutomaticRestart(
  vm: VirtualMachine,
  status: VirtualMachineStatus,
  snapshot: RunnerSnapshot | undefined,
  desiredConfig: string,
): boolean {
  return (
    vm.spec.disruptions?.restartApprovalMode === 'Automatic' &&
    status.phase === 'Running' &&
    (status.restartAwaitingChanges?.length ?? 0) > 0 &&
    snapshot?.config === desiredConfig &&
    !vm.metadata.annotations?.[OPERATION_ANNOTATION]
  );
}
