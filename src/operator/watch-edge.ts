// The watch edge: turns every change of a VirtualMachine, or of an object that belongs to one,
// into the VM's work-queue key. Payloads are summaries for inspection; reconcilers re-read state.
import {
  KubernetesObjectApi,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
} from '@kubernetes/client-node';
import { GROUP, KIND, PLURAL, VERSION } from '../api/virtual-machine.js';
import { OPERATION_KIND, OPERATION_PLURAL, operationKey } from '../api/virtual-machine-operation.js';
import {
  APP_NAME,
  LABEL_INSTANCE,
  LABEL_MANAGED_BY,
  LABEL_NAME,
  MANAGED_BY,
  OPERATION_ANNOTATION,
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

/**
 * The keys an object's change concerns: a VM's (and its operation's in flight, which waits for
 * the VM's status), an operation's, or that of the VM an owned object belongs to.
 */
export function keysOfObject(object: KubernetesObject): string[] {
  const { metadata } = object;
  const namespace = metadata?.namespace;
  if (!namespace || !metadata?.name) return [];
  if (object.kind === OPERATION_KIND) return [operationKey(namespace, metadata.name)];
  if (object.kind === KIND) {
    const operation = metadata.annotations?.[OPERATION_ANNOTATION];
    return [vmKey(namespace, metadata.name), ...(operation ? [operationKey(namespace, operation)] : [])];
  }
  const labels = metadata.labels ?? {};
  const instance = labels[LABEL_INSTANCE];
  return labels[LABEL_NAME] === APP_NAME && instance ? [vmKey(namespace, instance)] : [];
}

/** What is watched: the VMs and their operations, and by label the objects that belong to VMs. */
const WATCHED = [
  { apiVersion: `${GROUP}/${VERSION}`, kind: KIND, plural: PLURAL },
  { apiVersion: `${GROUP}/${VERSION}`, kind: OPERATION_KIND, plural: OPERATION_PLURAL },
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
 * Watches VMs, their operations and, by label, the objects that belong to them (StatefulSets, ConfigMaps, Pods,
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
    const keys = keysOfObject({ ...object, kind: spec.kind }); // list items carry no kind
    const event = {
      type,
      kind: spec.kind,
      name: object.metadata!.name!,
      resourceVersion: object.metadata?.resourceVersion,
    };
    for (const key of keys) {
      // A lost add is recovered by the resync that follows a Redis reconnect.
      sink(key, event).catch((err: unknown) => logger.warn({ err, key }, 'could not enqueue a watch event'));
    }
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
