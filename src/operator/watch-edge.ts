// The watch edge: turns every change of a VirtualMachine, or of an object that belongs to one,
// into the VM's work-queue key. Payloads are summaries for inspection; reconcilers re-read state.
import {
  KubernetesObjectApi,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
} from '@kubernetes/client-node';
import { GROUP, KIND, PLURAL, VERSION } from '../api/virtual-machine.js';
import {
  APP_NAME,
  LABEL_INSTANCE,
  LABEL_MANAGED_BY,
  LABEL_NAME,
  MANAGED_BY,
  vmKey,
} from '../reconcilers/virtual-machine/naming.js';
import { watchObjects } from '../kube/watch.js';
import type { Logger } from '../util/logger.js';

/** What caused a key to be enqueued, kept in the job for inspection only. */
export interface WatchEventSummary {
  type: 'changed' | 'deleted';
  kind: string;
  name: string;
  resourceVersion?: string;
}

export type KeySink = (key: string, event: WatchEventSummary) => Promise<void>;

export interface WatchEdge {
  /** Resolves when every watch has listed its objects once. */
  start(): Promise<void>;
  stop(): Promise<void>;
}

const OWNED = `${LABEL_NAME}=${APP_NAME},${LABEL_MANAGED_BY}=${MANAGED_BY}`;
/** Display Secrets (the user's) and runner Secrets (the manager's) both carry the app name. */
const VM_SECRETS = `${LABEL_NAME}=${APP_NAME}`;

/** The key of the VM an object concerns, or undefined for objects of no VM. */
export function keyOfObject(object: KubernetesObject): string | undefined {
  const { metadata } = object;
  const namespace = metadata?.namespace;
  if (!namespace || !metadata?.name) return undefined;
  if (object.kind === KIND) return vmKey(namespace, metadata.name);
  const labels = metadata.labels ?? {};
  const instance = labels[LABEL_INSTANCE];
  return labels[LABEL_NAME] === APP_NAME && instance ? vmKey(namespace, instance) : undefined;
}

/** What is watched: the VMs, and by label the objects that belong to them. */
const WATCHED = [
  { apiVersion: `${GROUP}/${VERSION}`, kind: KIND, plural: PLURAL },
  { apiVersion: 'apps/v1', kind: 'StatefulSet', plural: 'statefulsets', labelSelector: OWNED },
  { apiVersion: 'v1', kind: 'ConfigMap', plural: 'configmaps', labelSelector: OWNED },
  { apiVersion: 'v1', kind: 'Pod', plural: 'pods', labelSelector: OWNED },
  { apiVersion: 'v1', kind: 'Secret', plural: 'secrets', labelSelector: VM_SECRETS },
];

interface WatchSpec {
  kind: string;
  path: string;
  labelSelector?: string;
  list: () => Promise<KubernetesListObject<KubernetesObject>>;
}

function watchSpecs(objects: KubernetesObjectApi, namespace: string | undefined): WatchSpec[] {
  return WATCHED.map(({ apiVersion, kind, plural, labelSelector }) => ({
    kind,
    path: `${apiVersion.includes('/') ? '/apis' : '/api'}/${apiVersion}${namespace ? `/namespaces/${namespace}` : ''}/${plural}`,
    labelSelector,
    // Without a namespace, list covers all namespaces.
    list: () =>
      objects.list(apiVersion, kind, namespace, undefined, undefined, undefined, undefined, labelSelector),
  }));
}

/**
 * Watches VMs and, by label, the objects that belong to them (StatefulSets, ConfigMaps, Pods,
 * display and runner Secrets) in the given namespaces (all when undefined): list, then watch from that
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
  const specs = (namespaces ?? [undefined]).flatMap((namespace) => watchSpecs(objects, namespace));
  const forward = (spec: WatchSpec, type: WatchEventSummary['type']) => (object: KubernetesObject) => {
    const key = keyOfObject({ ...object, kind: spec.kind }); // list items carry no kind
    if (!key) return;
    const event = {
      type,
      kind: spec.kind,
      name: object.metadata!.name!,
      resourceVersion: object.metadata?.resourceVersion,
    };
    // A lost add is recovered by the resync that follows a Redis reconnect.
    sink(key, event).catch((err: unknown) => logger.warn({ err, key }, 'could not enqueue a watch event'));
  };
  const watches = specs.map((spec) => ({
    spec,
    watch: watchObjects(
      kubeConfig,
      spec,
      { upsert: forward(spec, 'changed'), deleted: forward(spec, 'deleted') },
      logger,
    ),
  }));
  return {
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
