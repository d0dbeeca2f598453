// The watch edge: one informer per kind (VirtualMachines, their operations, and by label the
// objects that belong to VMs) whose caches reconciles read instead of the apiserver, and whose
// changes become the VM's work-queue key.
//
// Why reading a cache is safe: a cache lags the apiserver only by the watch's delay, and every
// replica enqueues the key again once its own watch has the change, so some reconcile always runs
// on the newest state. Until then, a stale read must not do harm: a status write carries the VM's
// resourceVersion (a stale one is refused, and the key retried), the run-policy stop does too, and
// a replica whose cached VM is older than a spec change some replica has seen waits for its cache
// before it applies anything (the generation marks, see generation-marks.ts). Owned objects are
// written by server-side apply, so a write from a stale cache can only restore what the spec said.
import {
  KubernetesObjectApi,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
  type V1Node,
  type V1PersistentVolumeClaim,
  type V1Pod,
  type V1StorageClass,
} from '@kubernetes/client-node';
import { GROUP, KIND, PLURAL, VERSION } from '../api/virtual-machine.js';
import { OPERATION_KIND, OPERATION_PLURAL, operationKey } from '../api/virtual-machine-operation.js';
import { IMAGE_KIND, IMAGE_PLURAL, imageKey } from '../api/virtual-machine-image.js';
import {
  SNAPSHOT_KIND,
  SNAPSHOT_PLURAL,
  isSnapshotDone,
  snapshotKey,
} from '../api/virtual-machine-snapshot.js';
import { RESTORE_KIND, RESTORE_PLURAL, isRestoreDone, restoreKey } from '../api/virtual-machine-restore.js';
import { CLONE_KIND, CLONE_PLURAL, cloneKey, isCloneDone } from '../api/virtual-machine-clone.js';
import { EXPORT_KIND, EXPORT_PLURAL, exportKey, isExportDone } from '../api/virtual-machine-export.js';
import { SCHEDULE_KIND, SCHEDULE_PLURAL, scheduleKey } from '../api/virtual-machine-snapshot-schedule.js';
import { POOL_KIND, POOL_PLURAL } from '../api/vm-pool.js';
import {
  CLASS_KIND,
  CLASS_LABEL,
  CLASS_PLURAL,
  DEFAULT_CLASS_ANNOTATION,
  classKey,
} from '../api/virtual-machine-class.js';
import {
  IP_ADDRESS_KIND,
  IP_ADDRESS_PLURAL,
  LEASE_KIND,
  LEASE_PLURAL,
  ipAddressKey,
  leaseKey,
  leaseName,
} from '../api/virtual-machine-ip-address.js';
import { ipAddressNameOf } from '../reconcilers/virtual-machine-ip-address/attachment.js';
import { keepIdentityOnly, trimForCache, type CachedKind, type ObjectCache } from '../kube/object-cache.js';
import {
  APP_NAME,
  IMAGE_REPOSITORY_CLAIM,
  LABEL_COMPONENT,
  LABEL_IMAGE,
  LABEL_INSTANCE,
  LABEL_MANAGED_BY,
  LABEL_NAME,
  LABEL_RESTORE,
  LABEL_EXPORT,
  LABEL_SCHEDULE,
  LABEL_SNAPSHOT,
  MANAGED_BY,
  OPERATION_ANNOTATION,
  vmKey,
} from '../reconcilers/virtual-machine/naming.js';
import { watchObjects, type ObjectWatch } from '../kube/watch.js';
import { OPERATION_VM_LABEL } from '../reconcilers/virtual-machine-operation/operations.js';
import type { Logger } from '../util/logger.js';

/** What caused a key to be enqueued, kept in the job for inspection only. */
export interface WatchEventSummary {
  type: 'changed' | 'deleted';
  kind: string;
  name: string;
  resourceVersion?: string;
  /** A VM's, for the generation marks. */
  uid?: string;
  generation?: number;
}

export type KeySink = (key: string, event: WatchEventSummary) => Promise<void>;

export interface WatchEdge {
  /** Resolves when every watch has listed its objects once. */
  start(): Promise<void>;
  stop(): Promise<void>;
  cache: ObjectCache;
  /** Calls `listener` after each change of a namespaced cached object (the web GUI's live views). */
  onChange(listener: ChangeListener): () => void;
}

export type ChangeListener = (kind: CachedKind, namespace: string, name: string) => void;

const OWNED = `${LABEL_NAME}=${APP_NAME},${LABEL_MANAGED_BY}=${MANAGED_BY}`;
/**
 * The display Secrets people make (a generated one is the manager's, OWNED): anyone may label a
 * Secret so, so they are cached by identity alone (USER_SECRET_LABELS).
 */
const USER_DISPLAY_SECRETS = `${LABEL_NAME}=${APP_NAME},${LABEL_COMPONENT}=display-secret,${LABEL_MANAGED_BY}!=${MANAGED_BY}`;
const USER_SECRET_LABELS = [LABEL_NAME, LABEL_COMPONENT, LABEL_INSTANCE] as const;

/**
 * The keys an object's change concerns: a VM's (and its operation's in flight, which waits for
 * the VM's status), an operation's, or that of the VM an owned object belongs to. `vmUnchanged`:
 * the change is to the VM's status alone (vmop's own write, as a rule), which no VM reconcile
 * needs to see.
 */
export function keysOfObject(object: KubernetesObject, vmUnchanged = false): string[] {
  const { metadata } = object;
  const namespace = metadata?.namespace;
  if (!namespace || !metadata?.name) return [];
  if (object.kind === OPERATION_KIND) return [operationKey(namespace, metadata.name)];
  if (object.kind === IMAGE_KIND) return [imageKey(namespace, metadata.name)];
  if (object.kind === CLONE_KIND) return [cloneKey(namespace, metadata.name)];
  if (object.kind === EXPORT_KIND) return [exportKey(namespace, metadata.name)];
  if (object.kind === SCHEDULE_KIND) return [scheduleKey(namespace, metadata.name)];
  // A snapshot or a restore holds its VM's start while it copies the VM's volumes.
  if (object.kind === SNAPSHOT_KIND || object.kind === RESTORE_KIND) {
    const vm = (object as { spec?: { virtualMachineName?: string } }).spec?.virtualMachineName;
    const own = object.kind === SNAPSHOT_KIND ? snapshotKey : restoreKey;
    // A scheduled snapshot's end is its schedule's news (retention, failures).
    const schedule = metadata.labels?.[LABEL_SCHEDULE];
    return [
      own(namespace, metadata.name),
      ...(vm ? [vmKey(namespace, vm)] : []),
      ...(schedule ? [scheduleKey(namespace, schedule)] : []),
    ];
  }
  if (object.kind === KIND) {
    const operation = metadata.annotations?.[OPERATION_ANNOTATION];
    return [
      ...(vmUnchanged ? [] : [vmKey(namespace, metadata.name)]),
      ...(operation ? [operationKey(namespace, operation)] : []),
    ];
  }
  const labels = metadata.labels ?? {};
  if (labels[LABEL_NAME] !== APP_NAME) return [];
  const instance = labels[LABEL_INSTANCE];
  const image = labels[LABEL_IMAGE];
  const snapshot = labels[LABEL_SNAPSHOT];
  const restore = labels[LABEL_RESTORE];
  const vmExport = labels[LABEL_EXPORT];
  if (instance) return [vmKey(namespace, instance)];
  if (image) return [imageKey(namespace, image)];
  if (snapshot) return [snapshotKey(namespace, snapshot)];
  if (vmExport) return [exportKey(namespace, vmExport)];
  return restore ? [restoreKey(namespace, restore)] : [];
}

/** What a VM reconcile reads of a VM besides its status; the same fingerprint means no new work. */
export function vmFingerprint(object: KubernetesObject): string {
  const { metadata } = object;
  return JSON.stringify([
    metadata?.generation,
    // A pool assignment (written by the web GUI) starts the retention the reconcile keeps.
    (object as { status?: { assignment?: unknown } }).status?.assignment,
    metadata?.labels,
    metadata?.annotations,
    metadata?.deletionTimestamp,
    metadata?.finalizers,
  ]);
}

/** What is watched: the VMs and their operations, by label the objects that belong to VMs, and the nodes. */
export const WATCHED: Array<{
  apiVersion: string;
  kind: CachedKind;
  plural: string;
  labelSelector?: string;
  fieldSelector?: string;
  /** Objects of others, cached by name, version and these labels only (keepIdentityOnly). */
  identityOnly?: readonly string[];
  /** Not namespaced: watched once, whatever the namespaces. */
  clusterScoped?: boolean;
}> = [
  { apiVersion: `${GROUP}/${VERSION}`, kind: KIND, plural: PLURAL },
  { apiVersion: `${GROUP}/${VERSION}`, kind: OPERATION_KIND, plural: OPERATION_PLURAL },
  { apiVersion: `${GROUP}/${VERSION}`, kind: IMAGE_KIND, plural: IMAGE_PLURAL },
  { apiVersion: `${GROUP}/${VERSION}`, kind: SNAPSHOT_KIND, plural: SNAPSHOT_PLURAL },
  { apiVersion: `${GROUP}/${VERSION}`, kind: RESTORE_KIND, plural: RESTORE_PLURAL },
  { apiVersion: `${GROUP}/${VERSION}`, kind: CLONE_KIND, plural: CLONE_PLURAL },
  { apiVersion: `${GROUP}/${VERSION}`, kind: EXPORT_KIND, plural: EXPORT_PLURAL },
  { apiVersion: `${GROUP}/${VERSION}`, kind: SCHEDULE_KIND, plural: SCHEDULE_PLURAL },
  { apiVersion: `${GROUP}/${VERSION}`, kind: POOL_KIND, plural: POOL_PLURAL },
  { apiVersion: 'apps/v1', kind: 'StatefulSet', plural: 'statefulsets', labelSelector: OWNED },
  { apiVersion: 'v1', kind: 'ConfigMap', plural: 'configmaps', labelSelector: OWNED },
  { apiVersion: 'v1', kind: 'Pod', plural: 'pods', labelSelector: OWNED },
  { apiVersion: 'v1', kind: 'Secret', plural: 'secrets', labelSelector: OWNED },
  {
    apiVersion: 'v1',
    kind: 'Secret',
    plural: 'secrets',
    labelSelector: USER_DISPLAY_SECRETS,
    identityOnly: USER_SECRET_LABELS,
  },
  { apiVersion: 'v1', kind: 'Service', plural: 'services', labelSelector: OWNED },
  { apiVersion: 'v1', kind: 'ServiceAccount', plural: 'serviceaccounts', labelSelector: OWNED },
  // All of them: whether a policy of the namespace selects a VM's runner pods shapes vmop's own.
  { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', plural: 'networkpolicies' },
  {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    plural: 'persistentvolumeclaims',
    fieldSelector: `metadata.name=${IMAGE_REPOSITORY_CLAIM}`,
  },
  // The VMs' runner data and disk claims.
  { apiVersion: 'v1', kind: 'PersistentVolumeClaim', plural: 'persistentvolumeclaims', labelSelector: OWNED },
  // The budgets that keep a drain from evicting VMs that move live instead.
  {
    apiVersion: 'policy/v1',
    kind: 'PodDisruptionBudget',
    plural: 'poddisruptionbudgets',
    labelSelector: OWNED,
  },
  // Where runner pods run: a node that is lost, cordoned or out of service concerns its VMs.
  { apiVersion: 'v1', kind: 'Node', plural: 'nodes', clusterScoped: true },
  // Whether a disk's claim may grow (allowVolumeExpansion).
  { apiVersion: 'storage.k8s.io/v1', kind: 'StorageClass', plural: 'storageclasses', clusterScoped: true },
  // What VMs of a class may be, and where they run.
  { apiVersion: `${GROUP}/${VERSION}`, kind: CLASS_KIND, plural: CLASS_PLURAL, clusterScoped: true },
  // VMs' own addresses: the claims, and the leases that hold the addresses.
  { apiVersion: `${GROUP}/${VERSION}`, kind: IP_ADDRESS_KIND, plural: IP_ADDRESS_PLURAL },
  { apiVersion: `${GROUP}/${VERSION}`, kind: LEASE_KIND, plural: LEASE_PLURAL, clusterScoped: true },
];

type ClassView = KubernetesObject & { spec?: unknown; metadata?: { finalizers?: string[] } };
type VmView = KubernetesObject & {
  spec?: { vm?: { virtualMachineClassName?: string; virtualMachineIPAddressName?: string } };
};

/** What of a class concerns its VMs and its own reconcile (status changes do not). */
export function classFingerprint(vmClass: ClassView): string {
  const { metadata } = vmClass;
  return JSON.stringify([
    vmClass.spec,
    metadata?.annotations?.[DEFAULT_CLASS_ANNOTATION],
    metadata?.deletionTimestamp,
    metadata?.finalizers,
  ]);
}

type LeaseView = KubernetesObject & {
  spec?: { virtualMachineIPAddressRef?: { namespace?: string; name?: string } };
  status?: { phase?: string };
};

/** What of a lease concerns its claim and the claims waiting for an address: whom it is for, and whether it is released. */
export function leaseFingerprint(lease: LeaseView): string {
  return JSON.stringify([lease.spec, lease.status?.phase]);
}

/** What of a StorageClass concerns the VMs with claims of it: whether those may grow. */
export function storageClassFingerprint(storageClass: V1StorageClass): string {
  return JSON.stringify([storageClass.allowVolumeExpansion ?? false]);
}

/** What of a Node concerns its VMs; heartbeats alone change nothing of it. */
export function nodeFingerprint(node: V1Node): string {
  const ready = node.status?.conditions?.find((c) => c.type === 'Ready')?.status;
  return JSON.stringify([ready, node.spec?.unschedulable, node.spec?.taints?.map((t) => [t.key, t.effect])]);
}

interface WatchSpec {
  kind: CachedKind;
  path: string;
  labelSelector?: string;
  fieldSelector?: string;
  identityOnly?: readonly string[];
  indexLabels: readonly string[];
  list: () => Promise<KubernetesListObject<KubernetesObject>>;
}

/** What reconciles list cached objects by: the VM (or image, or VM of an operation) they belong to. */
const INDEXED_LABELS = [LABEL_INSTANCE, LABEL_IMAGE, OPERATION_VM_LABEL];

function watchSpecs(
  objects: KubernetesObjectApi,
  namespace: string | undefined,
  scope: 'namespaced' | 'cluster',
): WatchSpec[] {
  const watched = WATCHED.filter((w) => (w.clusterScoped ?? false) === (scope === 'cluster'));
  return watched.map(({ apiVersion, kind, plural, labelSelector, fieldSelector, identityOnly }) => ({
    kind,
    identityOnly,
    path: `${apiVersion.includes('/') ? '/apis' : '/api'}/${apiVersion}${namespace ? `/namespaces/${namespace}` : ''}/${plural}`,
    labelSelector,
    fieldSelector,
    indexLabels: INDEXED_LABELS,
    // Without a namespace, list covers all namespaces.
    list: async () => {
      const listed = await objects.list(
        apiVersion,
        kind,
        namespace,
        undefined,
        undefined,
        undefined,
        fieldSelector,
        labelSelector,
      );
      // The apiserver's list items carry no apiVersion and kind, its watch events do: cached alike,
      // or apply() finds every object listed at start unlike the desired one, and writes it again
      // on every reconcile (as a restarted manager did with the runner Secret and ServiceAccount).
      for (const item of listed.items) Object.assign(item, { apiVersion, kind });
      return listed;
    },
  }));
}

/**
 * Watches VMs, their operations and, by label, the objects that belong to them (ConfigMaps, Pods,
 * claims, Services, display and runner Secrets, the runner ServiceAccount, StatefulSets of vmop
 * 0.1) and the image repository claim, in the given namespaces (all when undefined): list, then watch from that
 * resourceVersion. A watch that fails (the apiserver restarting, 429s under load) is restarted
 * with backoff, never ending the process.
 */
export function createWatchEdge(
  kubeConfig: KubeConfig,
  namespaces: readonly string[] | undefined,
  sink: KeySink,
  logger: Logger,
): WatchEdge {
  const objects = KubernetesObjectApi.makeApiClient(kubeConfig);
  const specs = [
    ...(namespaces ?? [undefined]).flatMap((namespace) => watchSpecs(objects, namespace, 'namespaced')),
    ...watchSpecs(objects, undefined, 'cluster'),
  ];
  /**
   * Cluster-scoped objects that concern VMs: the last fingerprint of each (only a change of what
   * VMs read of it counts), and the keys of the VMs it concerns (from the caches): a Node's, those
   * whose runner pods run on it; a StorageClass's, those with claims of that class.
   */
  const clusterFingerprints = new Map<string, string>();
  /** The keys of the VMs whose cached objects of `kind` `concern` returns true for. */
  const vmsWith = <T extends KubernetesObject>(kind: CachedKind, concern: (object: T) => boolean) =>
    cache
      .list<T>(kind, undefined)
      .filter(concern)
      .flatMap((object) => keysOfObject({ ...object, kind }));
  const clusterScoped: Partial<
    Record<
      CachedKind,
      {
        fingerprint: (object: KubernetesObject) => string;
        vms: (name: string, object: KubernetesObject, type: WatchEventSummary['type']) => string[];
      }
    >
  > = {
    Node: {
      fingerprint: (node) => nodeFingerprint(node as V1Node),
      vms: (node) => vmsWith<V1Pod>('Pod', (pod) => pod.spec?.nodeName === node),
    },
    // A class's change concerns the VMs that name it (or take it as the default: all that name
    // none), and the class's own reconcile (its finalizer and status).
    VirtualMachineClass: {
      fingerprint: (vmClass) => classFingerprint(vmClass as ClassView),
      vms: (name) => [
        classKey(name),
        ...cache
          .list<VmView>(KIND, undefined)
          .filter((vm) => [name, undefined].includes(vm.spec?.vm?.virtualMachineClassName))
          .map((vm) => vmKey(vm.metadata!.namespace!, vm.metadata!.name!)),
      ],
    },
    // A lease's change concerns its own reconcile and its claim's; one released or gone, the
    // claims that wait for a free address. Leases of namespaces this replica does not watch are
    // another installation's.
    VirtualMachineIPAddressLease: {
      fingerprint: (lease) => leaseFingerprint(lease as LeaseView),
      vms: (name, lease, type) => {
        const ref = (lease as LeaseView).spec?.virtualMachineIPAddressRef;
        if (!ref?.namespace || !ref.name || (namespaces && !namespaces.includes(ref.namespace))) return [];
        const freed = type === 'deleted' || (lease as LeaseView).status?.phase === 'Released';
        const waiting = freed
          ? cache
              .list<KubernetesObject & { status?: { address?: string } }>(IP_ADDRESS_KIND, undefined)
              .filter((claim) => !claim.status?.address)
              .map((claim) => ipAddressKey(claim.metadata!.namespace!, claim.metadata!.name!))
          : [];
        return [leaseKey(name), ipAddressKey(ref.namespace, ref.name), ...waiting];
      },
    },
    StorageClass: {
      fingerprint: (storageClass) => storageClassFingerprint(storageClass as V1StorageClass),
      vms: (storageClass) =>
        vmsWith<V1PersistentVolumeClaim>(
          'PersistentVolumeClaim',
          (claim) => claim.spec?.storageClassName === storageClass,
        ),
    },
  };
  const vmsUsingImage = (namespace: string, image: string) =>
    cache
      .list<
        KubernetesObject & { spec?: { vm?: { disks?: Array<{ source?: { image?: { name?: string } } }> } } }
      >(KIND, namespace)
      .filter((vm) => vm.spec?.vm?.disks?.some((disk) => disk.source?.image?.name === image))
      .map((vm) => vmKey(namespace, vm.metadata!.name!));
  type Waiting = KubernetesObject & {
    spec?: {
      virtualMachineName?: string;
      virtualMachineSnapshotName?: string;
      source?: { virtualMachineName?: string; virtualMachineSnapshotName?: string };
    };
    status?: { phase?: string };
  };
  /**
   * A VM's change, or its runner pod's, concerns the snapshots and restores waiting for the VM to
   * stop; a snapshot's change concerns the restores and clones waiting for it. An export of either
   * follows it while it serves (a VM that starts takes its disks back).
   */
  const waitingFor = (namespace: string, vm?: string, snapshot?: string) => [
    ...cache
      .list<Waiting>(SNAPSHOT_KIND, namespace)
      .filter((copy) => vm !== undefined && copy.spec?.virtualMachineName === vm && !isSnapshotDone(copy))
      .map((copy) => snapshotKey(namespace, copy.metadata!.name!)),
    ...cache
      .list<Waiting>(RESTORE_KIND, namespace)
      .filter(
        (restore) =>
          !isRestoreDone(restore) &&
          ((vm !== undefined && restore.spec?.virtualMachineName === vm) ||
            (snapshot !== undefined && restore.spec?.virtualMachineSnapshotName === snapshot)),
      )
      .map((restore) => restoreKey(namespace, restore.metadata!.name!)),
    ...cache
      .list<Waiting>(CLONE_KIND, namespace)
      .filter(
        (clone) =>
          !isCloneDone(clone) &&
          snapshot !== undefined &&
          clone.spec?.virtualMachineSnapshotName === snapshot,
      )
      .map((clone) => cloneKey(namespace, clone.metadata!.name!)),
    ...cache
      .list<Waiting>(EXPORT_KIND, namespace)
      .filter(
        (vmExport) =>
          !isExportDone(vmExport) &&
          ((vm !== undefined && vmExport.spec?.source?.virtualMachineName === vm) ||
            (snapshot !== undefined && vmExport.spec?.source?.virtualMachineSnapshotName === snapshot)),
      )
      .map((vmExport) => exportKey(namespace, vmExport.metadata!.name!)),
  ];
  /** A pool's change (it went, its retention changed) concerns its VMs and those assigned from it. */
  const vmsOfPool = (namespace: string, pool: string) =>
    cache
      .list<KubernetesObject & { spec?: { pools?: string[] }; status?: { assignment?: { pool?: string } } }>(
        KIND,
        namespace,
      )
      .filter((vm) => vm.spec?.pools?.includes(pool) || vm.status?.assignment?.pool === pool)
      .map((vm) => vmKey(namespace, vm.metadata!.name!));
  /** The class a VM names, or every default class when it names none. */
  const classesConcerned = (vm: VmView) => {
    const named = vm.spec?.vm?.virtualMachineClassName;
    if (named) return [classKey(named)];
    return cache
      .list<ClassView>(CLASS_KIND, undefined)
      .filter((c) => c.metadata?.annotations?.[DEFAULT_CLASS_ANNOTATION] === 'true')
      .map((c) => classKey(c.metadata!.name!));
  };
  /** A NetworkPolicy not vmop's may select any VM's runner pods of its namespace. */
  const vmsOfNamespace = (policy: KubernetesObject) =>
    policy.metadata?.labels?.[LABEL_MANAGED_BY] === MANAGED_BY
      ? []
      : cache
          .list<VmView>(KIND, policy.metadata!.namespace!)
          .map((vm) => vmKey(vm.metadata!.namespace!, vm.metadata!.name!));
  /** The classes each VM (by uid) concerned last: one it left concerns them too. */
  const lastClasses = new Map<string, string[]>();
  const vmClassKeys = (uid: string | undefined, type: WatchEventSummary['type'], vm: VmView) => {
    const now = type === 'deleted' ? [] : classesConcerned(vm);
    const before = (uid && lastClasses.get(uid)) || [];
    if (uid) {
      if (type === 'deleted') lastClasses.delete(uid);
      else lastClasses.set(uid, now);
    }
    return [...new Set([...before, ...now])];
  };
  /**
   * The address claim each VM (by uid) had last: one it left concerns it too (it detaches). Only
   * claims that exist: one vmop makes for a VM brings its own key, and VMs in a cluster without
   * addresses enqueue nothing more.
   */
  const lastIpAddresses = new Map<string, string>();
  const vmIpAddressKeys = (uid: string | undefined, type: WatchEventSummary['type'], vm: VmView) => {
    const namespace = vm.metadata!.namespace!;
    const now = ipAddressNameOf(vm); // a deleted VM's too: its claim detaches
    const before = uid ? lastIpAddresses.get(uid) : undefined;
    if (uid && type === 'deleted') lastIpAddresses.delete(uid);
    else if (uid && now) lastIpAddresses.set(uid, now);
    return [...new Set([before, now])]
      .filter((name): name is string => name !== undefined && !!cache.get(IP_ADDRESS_KIND, namespace, name))
      .map((name) => ipAddressKey(namespace, name));
  };
  /**
   * A claim's change concerns its own reconcile, the VMs that name it (it attaches to one of them),
   * and its lease (released when it goes).
   */
  const ipAddressKeys = (claim: KubernetesObject & { status?: { address?: string } }) => {
    const namespace = claim.metadata!.namespace!;
    const name = claim.metadata!.name!;
    const address = claim.status?.address;
    return [
      ipAddressKey(namespace, name),
      ...(address ? [leaseKey(leaseName(address))] : []),
      ...cache
        .list<VmView>(KIND, namespace)
        .filter((vm) => ipAddressNameOf(vm) === name)
        .map((vm) => vmKey(namespace, vm.metadata!.name!)),
    ];
  };
  /** The last fingerprint of each VM (by uid): a status-only change enqueues no VM reconcile. */
  const vmFingerprints = new Map<string, string>();
  const listeners = new Set<ChangeListener>();
  const forward = (spec: WatchSpec, type: WatchEventSummary['type']) => (object: KubernetesObject) => {
    const typed = { ...object, kind: spec.kind }; // list items carry no kind
    const { name, uid, generation, resourceVersion } = object.metadata!;
    const concerning = clusterScoped[spec.kind];
    if (concerning) {
      const fingerprint = type === 'deleted' ? 'deleted' : concerning.fingerprint(object);
      const known = `${spec.kind}/${name!}`;
      if (clusterFingerprints.get(known) === fingerprint) return;
      clusterFingerprints.set(known, fingerprint);
      const event = { type, kind: spec.kind, name: name!, resourceVersion };
      for (const key of new Set(concerning.vms(name!, object, type)))
        sink(key, event).catch((err: unknown) =>
          logger.warn({ err, key }, 'could not enqueue a watch event'),
        );
      return;
    }
    for (const listener of listeners) listener(spec.kind, object.metadata!.namespace!, name!);
    let vmUnchanged = false;
    if (spec.kind === KIND && uid) {
      if (type === 'deleted') {
        vmFingerprints.delete(uid);
      } else {
        const fingerprint = vmFingerprint(object);
        vmUnchanged = vmFingerprints.get(uid) === fingerprint;
        vmFingerprints.set(uid, fingerprint);
      }
    }
    const event = {
      type,
      kind: spec.kind,
      name: name!,
      resourceVersion,
      ...(spec.kind === KIND && { uid, generation }),
    };
    // An image's change (Ready, say) concerns the VMs with disks filled from it.
    const imageUsers = spec.kind === IMAGE_KIND ? vmsUsingImage(object.metadata!.namespace!, name!) : [];
    const poolMembers = spec.kind === POOL_KIND ? vmsOfPool(object.metadata!.namespace!, name!) : [];
    const policyTakers = spec.kind === 'NetworkPolicy' ? vmsOfNamespace(object) : [];
    const vmConcerned =
      spec.kind === 'Pod' ? object.metadata?.labels?.[LABEL_INSTANCE] : spec.kind === KIND ? name : undefined;
    const snapshotConcerned = spec.kind === SNAPSHOT_KIND ? name : undefined;
    const waiting =
      vmConcerned || snapshotConcerned
        ? waitingFor(object.metadata!.namespace!, vmConcerned, snapshotConcerned)
        : [];
    // A VM that comes, goes or changes its class concerns the classes' reconciles (who uses them).
    // So does a runner pod made from a class (its label), which holds the class while it exists.
    const podClass = spec.kind === 'Pod' ? object.metadata?.labels?.[CLASS_LABEL] : undefined;
    const classes =
      spec.kind === KIND && !vmUnchanged
        ? vmClassKeys(uid, type, object as VmView)
        : podClass
          ? [classKey(podClass)]
          : [];
    const ipAddresses =
      spec.kind === KIND && !vmUnchanged
        ? vmIpAddressKeys(uid, type, object as VmView)
        : spec.kind === IP_ADDRESS_KIND
          ? ipAddressKeys(object)
          : [];
    const keys = [
      ...keysOfObject(typed, vmUnchanged),
      ...imageUsers,
      ...poolMembers,
      ...policyTakers,
      ...waiting,
      ...classes,
      ...ipAddresses,
    ];
    for (const key of new Set(keys)) {
      // A lost add is recovered by the resync that follows a Redis reconnect.
      sink(key, event).catch((err: unknown) => logger.warn({ err, key }, 'could not enqueue a watch event'));
    }
  };
  const watches = specs.map((spec) => ({
    spec,
    watch: watchObjects(
      kubeConfig,
      spec,
      {
        trim: (object) =>
          spec.identityOnly ? keepIdentityOnly(object, spec.identityOnly) : trimForCache(object, spec.kind), // list items carry no kind
        upsert: forward(spec, 'changed'),
        deleted: forward(spec, 'deleted'),
      },
      logger,
    ),
  }));
  const watchesOf = new Map<CachedKind, ObjectWatch<KubernetesObject>[]>();
  for (const { spec, watch } of watches)
    watchesOf.set(spec.kind, [...(watchesOf.get(spec.kind) ?? []), watch]);
  const cache: ObjectCache = {
    get<T extends KubernetesObject>(kind: CachedKind, namespace: string, name: string) {
      for (const watch of watchesOf.get(kind) ?? []) {
        const found = watch.get(name, namespace);
        if (found) return found as T;
      }
      return undefined;
    },
    list<T extends KubernetesObject>(
      kind: CachedKind,
      namespace: string | undefined,
      labels: Record<string, string> = {},
    ) {
      return (watchesOf.get(kind) ?? []).flatMap((watch) => watch.list(namespace, labels) as T[]);
    },
  };
  return {
    cache,
    onChange(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    async start() {
      await Promise.all(
        watches.map(async ({ spec, watch }) => {
          await watch.start();
          logger.info({ kind: spec.kind, path: spec.path }, 'watching');
        }),
      );
    },
    async stop() {
      await Promise.all(watches.map(({ watch }) => watch.stop()));
    },
  };
}
