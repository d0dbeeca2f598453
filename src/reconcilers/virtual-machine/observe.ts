// What a VM reconcile starts from: everything read from the watches' caches and Redis (and the
// user's Secrets, which are not cached), in one object. Reads only; the planning is plan.ts's.
import type {
  KubernetesObject,
  V1ConfigMap,
  V1Node,
  V1PersistentVolumeClaim,
  V1Pod,
  V1PodDisruptionBudget,
  V1Secret,
  V1ServiceAccount,
  V1Service,
  V1NetworkPolicy,
  V1StatefulSet,
  V1StorageClass,
} from '@kubernetes/client-node';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ImportProgress } from '../../api/import-progress.js';
import type { RunnerSnapshot } from '../../api/runner-snapshot.js';
import { VirtualMachine } from '../../api/virtual-machine.js';
import { IMAGE_KIND, VirtualMachineImage } from '../../api/virtual-machine-image.js';
import { OPERATION_KIND, VirtualMachineOperation } from '../../api/virtual-machine-operation.js';
import { SNAPSHOT_KIND, VirtualMachineSnapshot } from '../../api/virtual-machine-snapshot.js';
import type { SnapshotCopyConfig } from '../../api/snapshot-copy.js';
import { RESTORE_KIND } from '../../api/virtual-machine-restore.js';
import { POOL_KIND, VmPool } from '../../api/vm-pool.js';
import { IP_ADDRESS_KIND, VirtualMachineIPAddress } from '../../api/virtual-machine-ip-address.js';
import { ipAddressNameOf } from '../virtual-machine-ip-address/attachment.js';
import { readOptional, type KubeClients } from '../../kube/clients.js';
import type { ObjectCache } from '../../kube/object-cache.js';
import type { HandlerResult } from '../../queue/index.js';
import type { Logger } from '../../util/logger.js';
import { isAttachPod } from './disks/attach-pod.js';
import { defaultStorageClass, type StorageClasses } from './disks/claim-binding.js';
import { chooseDisplaySecret } from './runner-config/display-secret.js';
import { isImporterPod } from './disks/importer-pod.js';
import type { MigrationSlots, SlotAnswer } from '../../operator/migration-slots.js';
import { readVmMigrationRequest } from './migration/request.js';
import { snapshotSuffixOfPod } from './migration/target.js';
import {
  APP_NAME,
  IMAGE_REPOSITORY_CLAIM,
  LABEL_INSTANCE,
  LABEL_NAME,
  LABEL_VOLUME,
  displaySecretLabels,
} from './naming.js';
import { nodeFacts, type NodeFacts } from './node-facts.js';
import { provisioningSecretNames } from './runner-config/provisioning-secrets.js';
import { planRunnerPods } from './runner-pod/plan.js';
import { RUNNER_SECRET, RUNNER_SERVICE_ACCOUNT } from './runner-config/identity.js';
import { cachedClasses, chooseClass, type ClassChoice } from './class/vm-class.js';
import { migrationSecretName } from './runner-pod/pod.js';

/** How long a reconcile waits for a cache behind a seen change, and when it tries again. */
export const STALE_CACHE = { waitMs: 1_000, pollMs: 10, retryMs: 500, attempts: 3 };

export interface Observed {
  key: string;
  namespace: string;
  name: string;
  vm: VirtualMachine;
  /** The VM's display Secret, its own or the one vmop generated, if cached. */
  displaySecret?: V1Secret;
  /** The user's provisioning Secrets the spec names (null: named but missing). */
  provisioningSecrets: { cloudInit?: V1Secret | null; sysprep?: V1Secret | null };
  /** The VM's claims (by its labels). */
  claims: V1PersistentVolumeClaim[];
  /** The VM's pods by kind: runner pods (two during a migration), importer pods, attach pods. */
  pods: { runner: V1Pod[]; importer: V1Pod[]; attach: V1Pod[] };
  /** Runner pods the status names that the apiserver said just now do not exist. */
  absentPods?: ReadonlySet<string>;
  images: (name: string) => VirtualMachineImage | undefined;
  /** The snapshots and restores copying the VM's volumes now, e.g. `snapshot daily` (the VM does not start meanwhile). */
  volumeCopies: string[];
  /**
   * A snapshot of the running VM under way: its name, the runner pod (uid) it was cut on, and the
   * copy that pod's runner is asked for once the snapshot's exports serve.
   */
  snapshotCopy?: { snapshot: string; podUid: string; copy?: SnapshotCopyConfig };
  /** The latest progress the running importer pods sent, by volume. */
  importProgress: Map<string, ImportProgress>;
  storageClasses: StorageClasses;
  node: (name: string) => NodeFacts;
  /** Every node, for whether another one can take the VM. */
  nodes: NodeFacts[];
  /** The latest snapshot of the runner of the pod the status names (or of the VM's key). */
  snapshot?: RunnerSnapshot;
  /** The latest snapshot of a migration's target runner, while the migration runs. */
  targetSnapshot?: RunnerSnapshot;
  owned: {
    configMap?: V1ConfigMap;
    runnerSecret?: V1Secret;
    serviceAccount?: V1ServiceAccount;
    /** A runner StatefulSet of vmop 0.1. */
    statefulSet?: V1StatefulSet;
    budget?: V1PodDisruptionBudget;
    /** The Service of the VM's name, if it carries vmop's labels. */
    service?: V1Service;
    hasMigrationKeys: boolean;
    imageRepository?: V1PersistentVolumeClaim;
  };
  /** The NetworkPolicies of the VM's namespace (vmop's and others'). */
  networkPolicies: V1NetworkPolicy[];
  /** An operation of the VM's namespace, when it is cached and valid. */
  operation: (name: string | undefined) => VirtualMachineOperation | undefined;
  /** The pool the VM is assigned from, if it (still) exists. */
  assignedPool?: VmPool;
  /** The VM's VirtualMachineClass (named, or the default), or why it has none it can run with. */
  vmClass: ClassChoice;
  /** The VirtualMachineIPAddress the VM names, or the one vmop makes for it, if it exists. */
  ipAddress?: VirtualMachineIPAddress;
  /** Whether the migration asked for may begin (the migration limits), while it is to begin. */
  migrationSlot?: SlotAnswer;
  now: Date;
}

export interface ObserveIo {
  clients: KubeClients;
  cache: ObjectCache;
  /** The VM as the cache has it (or this replica's own newer write), once fresh; stale: try again. */
  freshVm(key: string, namespace: string, name: string): Promise<{ raw?: KubernetesObject; stale?: boolean }>;
  readSnapshot?: (key: string, suffix?: string) => Promise<RunnerSnapshot | undefined>;
  readImportProgress?: (key: string, volume: string) => Promise<ImportProgress | undefined>;
  migrationSlots?: MigrationSlots;
  logger: Logger;
  now: () => Date;
}

/** What the reconcile of `key` starts from, or how it ends before it starts. */
export async function observeVm(
  key: string,
  namespace: string,
  name: string,
  named: string | undefined,
  io: ObserveIo,
): Promise<Observed | { end: HandlerResult }> {
  const { cache } = io;
  // Read at once, beside freshVm's Redis read rather than after it (one round trip less to wait).
  // The runner of the pod the VM's status names (a migration's target publishes under its own key).
  const suffix = snapshotSuffixOfPod(named ? cache.get<V1Pod>('Pod', namespace, named) : undefined);
  const snapshotRead = io.readSnapshot?.(key, suffix) ?? Promise.resolve(undefined);
  snapshotRead.catch(() => undefined); // awaited below, unless the reconcile ends before
  const { raw, stale } = await io.freshVm(key, namespace, name);
  if (stale) {
    io.logger.info({ key }, 'the cached VM is older than a seen change; trying again');
    return { end: { requeueAfter: STALE_CACHE.retryMs } };
  }
  // Not cached: gone, or not seen yet (its watch event brings the key back).
  if (!raw || raw.metadata?.deletionTimestamp) return { end: undefined }; // owned objects go by garbage collection
  const vm = VirtualMachine.parse(raw); // a copy: cached objects are never changed

  // The VM's runner pods, whatever their names (two during a migration, `<vm>-0` of vmop 0.1).
  const vmObjects = { [LABEL_NAME]: APP_NAME, [LABEL_INSTANCE]: name };
  const allPods = cache.list<V1Pod>('Pod', namespace, vmObjects);
  const pods = {
    runner: allPods.filter((pod) => !isImporterPod(pod) && !isAttachPod(pod)),
    importer: allPods.filter(isImporterPod),
    attach: allPods.filter(isAttachPod),
  };
  const node = (nodeName: string) => nodeFacts(nodeName, cache.get<V1Node>('Node', '', nodeName));
  const absent = await verifyNamedPod(vm, pods.runner, node, io);
  if (absent && 'end' in absent) return absent;

  // The user's Secrets carry no vmop label, so they are not cached: read when referenced.
  const readSecret = (secretName: string | undefined) =>
    secretName
      ? readOptional(() => io.clients.core.readNamespacedSecret({ name: secretName, namespace })).then(
          (secret) => secret ?? null,
        )
      : undefined;
  const secretNames = provisioningSecretNames(vm);
  const operation = (opName: string | undefined) => {
    const cached = opName ? cache.get(OPERATION_KIND, namespace, opName) : undefined;
    return cached && VirtualMachineOperation.safeParse(cached).data;
  };
  const pool = vm.status?.assignment?.pool;
  const cachedPool = pool && cache.get<KubernetesObject>(POOL_KIND, namespace, pool);
  const targetPod = vm.status?.migrationState?.targetPod;
  const target = targetPod ? pods.runner.find((pod) => pod.metadata?.name === targetPod) : undefined;
  return {
    key,
    namespace,
    name,
    vm,
    displaySecret: chooseDisplaySecret(cache.list<V1Secret>('Secret', namespace, displaySecretLabels(name))),
    provisioningSecrets: {
      cloudInit: await readSecret(secretNames.cloudInit),
      sysprep: await readSecret(secretNames.sysprep),
    },
    claims: cache.list<V1PersistentVolumeClaim>('PersistentVolumeClaim', namespace, vmObjects),
    pods,
    ...(absent && { absentPods: absent }),
    images: (imageName) => {
      const cached = cache.get<KubernetesObject>(IMAGE_KIND, namespace, imageName);
      return cached && VirtualMachineImage.safeParse(cached).data;
    },
    volumeCopies: (
      [
        [SNAPSHOT_KIND, 'snapshot'],
        [RESTORE_KIND, 'restore'],
      ] as const
    ).flatMap(([kind, what]) =>
      cache
        .list<KubernetesObject & { spec?: { virtualMachineName?: string }; status?: { phase?: string } }>(
          kind,
          namespace,
        )
        .filter((copy) => copy.spec?.virtualMachineName === name && copy.status?.phase === 'InProgress')
        .map((copy) => `${what} ${copy.metadata!.name!}`),
    ),
    ...(() => {
      const snapshotCopy = runningSnapshotCopy(cache, namespace, name);
      return snapshotCopy && { snapshotCopy };
    })(),
    importProgress: await readImportProgress(key, pods.importer, io),
    storageClasses: {
      byName: (className) => cache.get<V1StorageClass>('StorageClass', '', className),
      byDefault: () => defaultStorageClass(cache.list<V1StorageClass>('StorageClass', undefined)),
    },
    node,
    nodes: cache.list<V1Node>('Node', undefined).map((other) => nodeFacts(other.metadata!.name!, other)),
    snapshot: await snapshotRead,
    targetSnapshot:
      target && !vm.status?.migrationState?.result
        ? await io.readSnapshot?.(key, snapshotSuffixOfPod(target))
        : undefined,
    owned: {
      configMap: cache.get<V1ConfigMap>('ConfigMap', namespace, name),
      runnerSecret: cache.get<V1Secret>('Secret', namespace, RUNNER_SECRET),
      serviceAccount: cache.get<V1ServiceAccount>('ServiceAccount', namespace, RUNNER_SERVICE_ACCOUNT),
      statefulSet: cache.get<V1StatefulSet>('StatefulSet', namespace, name),
      budget: cache.get<V1PodDisruptionBudget>('PodDisruptionBudget', namespace, name),
      service: cache.get<V1Service>('Service', namespace, name),
      hasMigrationKeys: cache.get<V1Secret>('Secret', namespace, migrationSecretName(name)) !== undefined,
      imageRepository: cache.get<V1PersistentVolumeClaim>(
        'PersistentVolumeClaim',
        namespace,
        IMAGE_REPOSITORY_CLAIM,
      ),
    },
    networkPolicies: cache.list<V1NetworkPolicy>('NetworkPolicy', namespace),
    operation,
    assignedPool: cachedPool ? VmPool.safeParse(cachedPool).data : undefined,
    vmClass: chooseClass(vm, cachedClasses(cache)),
    ipAddress: VirtualMachineIPAddress.safeParse(
      cache.get(IP_ADDRESS_KIND, namespace, ipAddressNameOf(vm) ?? ''),
    ).data,
    migrationSlot: await askMigrationSlot(key, vm, pods.runner, io),
    now: io.now(),
  };
}

/** A slot for the migration the VM is asked for, while it is yet to begin (migration-slots.ts). */
async function askMigrationSlot(key: string, vm: VirtualMachine, runnerPods: V1Pod[], io: ObserveIo) {
  const request = readVmMigrationRequest(vm.metadata.annotations);
  const state = vm.status?.migrationState;
  if (!request || !io.migrationSlots || (state?.id === request.id && state.waiting === undefined))
    return undefined;
  const source = runnerPods.find((pod) => pod.metadata?.name === vm.status?.runnerPod?.name);
  const node = source?.spec?.nodeName;
  return node ? io.migrationSlots.take(key, request.id, node) : undefined;
}

/**
 * The status names a pod the cache lacks: just made (the cache lags, briefly) or gone? Waits a
 * little for the cache, then the apiserver says. The names found absent, or how the reconcile ends.
 */
async function verifyNamedPod(
  vm: VirtualMachine,
  runnerPods: V1Pod[],
  node: (name: string) => NodeFacts,
  io: ObserveIo,
): Promise<ReadonlySet<string> | { end: HandlerResult } | undefined> {
  const named = planRunnerPods({ vm, pods: runnerPods, node }).verify;
  if (!named) return undefined;
  const namespace = vm.metadata.namespace!;
  for (let waited = 0; waited < STALE_CACHE.waitMs; waited += STALE_CACHE.pollMs) {
    await sleep(STALE_CACHE.pollMs);
    if (io.cache.get('Pod', namespace, named)) return { end: { requeueAfter: 0 } };
  }
  if (await readOptional(() => io.clients.core.readNamespacedPod({ name: named, namespace })))
    return { end: { requeueAfter: STALE_CACHE.retryMs } };
  return new Set([named]);
}

/** The progress the running importer pods sent, by volume. */
async function readImportProgress(key: string, importerPods: V1Pod[], io: ObserveIo) {
  const progress = new Map<string, ImportProgress>();
  for (const pod of importerPods) {
    const volume = pod.metadata?.labels?.[LABEL_VOLUME];
    if (!volume || pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed') continue;
    const sent = await io.readImportProgress?.(key, volume);
    if (sent) progress.set(volume, sent);
  }
  return progress;
}

/** The oldest snapshot of the running VM in progress: what its runner copies, once the exports serve. */
function runningSnapshotCopy(cache: ObjectCache, namespace: string, vmName: string) {
  const copying = cache
    .list<KubernetesObject>(SNAPSHOT_KIND, namespace)
    .flatMap((object) => {
      const parsed = VirtualMachineSnapshot.safeParse(object);
      return parsed.success ? [parsed.data] : [];
    })
    .filter(
      (snapshot) =>
        snapshot.spec.virtualMachineName === vmName &&
        snapshot.status?.phase === 'InProgress' &&
        snapshot.status.runner !== undefined,
    )
    .sort((a, b) =>
      String(a.metadata.creationTimestamp).localeCompare(String(b.metadata.creationTimestamp)),
    )[0];
  const runner = copying?.status?.runner;
  return (
    copying &&
    runner && {
      snapshot: copying.metadata.name,
      podUid: runner.podUid,
      ...(runner.targets && {
        copy: {
          id: copying.metadata.uid!,
          requireFreeze: copying.spec.requiredConsistency,
          disks: runner.targets,
        },
      }),
    }
  );
}
