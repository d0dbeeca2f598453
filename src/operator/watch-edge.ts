// The watch edge: turns every change of a VirtualMachine, or of an object that belongs to one,
// into the VM's work-queue key. Payloads are summaries for inspection; reconcilers re-read state.
import {
  AppsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  makeInformer,
  type Informer,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
} from '@kubernetes/client-node';
import { GROUP, KIND, PLURAL, VERSION } from '../api/virtual-machine.js';
import {
  APP_NAME,
  LABEL_COMPONENT,
  LABEL_INSTANCE,
  LABEL_MANAGED_BY,
  LABEL_NAME,
  MANAGED_BY,
  vmKey,
} from '../reconcilers/virtual-machine/naming.js';
import type { Logger } from '../util/logger.js';

/** What caused a key to be enqueued, kept in the job for inspection only. */
export interface WatchEventSummary {
  type: 'added' | 'updated' | 'deleted';
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
const DISPLAY_SECRETS = `${LABEL_NAME}=${APP_NAME},${LABEL_COMPONENT}=display-secret`;
const RESTART_BASE_MS = 500;
const RESTART_CAP_MS = 30_000;

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

type Lister = () => Promise<KubernetesListObject<KubernetesObject>>;
interface WatchSpec {
  kind: string;
  path: string;
  labelSelector?: string;
  list: Lister;
}

function watchSpecs(kubeConfig: KubeConfig, namespace: string | undefined): WatchSpec[] {
  const core = kubeConfig.makeApiClient(CoreV1Api);
  const apps = kubeConfig.makeApiClient(AppsV1Api);
  const custom = kubeConfig.makeApiClient(CustomObjectsApi);
  const ns = namespace ? `/namespaces/${namespace}` : '';
  const cast = (promise: Promise<unknown>) => promise as Promise<KubernetesListObject<KubernetesObject>>;
  return [
    {
      kind: KIND,
      path: `/apis/${GROUP}/${VERSION}${ns}/${PLURAL}`,
      list: () =>
        cast(
          namespace
            ? custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, plural: PLURAL, namespace })
            : custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PLURAL }),
        ),
    },
    {
      kind: 'StatefulSet',
      path: `/apis/apps/v1${ns}/statefulsets`,
      labelSelector: OWNED,
      list: () =>
        cast(
          namespace
            ? apps.listNamespacedStatefulSet({ namespace, labelSelector: OWNED })
            : apps.listStatefulSetForAllNamespaces({ labelSelector: OWNED }),
        ),
    },
    {
      kind: 'ConfigMap',
      path: `/api/v1${ns}/configmaps`,
      labelSelector: OWNED,
      list: () =>
        cast(
          namespace
            ? core.listNamespacedConfigMap({ namespace, labelSelector: OWNED })
            : core.listConfigMapForAllNamespaces({ labelSelector: OWNED }),
        ),
    },
    {
      kind: 'Pod',
      path: `/api/v1${ns}/pods`,
      labelSelector: OWNED,
      list: () =>
        cast(
          namespace
            ? core.listNamespacedPod({ namespace, labelSelector: OWNED })
            : core.listPodForAllNamespaces({ labelSelector: OWNED }),
        ),
    },
    {
      kind: 'Secret',
      path: `/api/v1${ns}/secrets`,
      labelSelector: DISPLAY_SECRETS,
      list: () =>
        cast(
          namespace
            ? core.listNamespacedSecret({ namespace, labelSelector: DISPLAY_SECRETS })
            : core.listSecretForAllNamespaces({ labelSelector: DISPLAY_SECRETS }),
        ),
    },
  ];
}

/**
 * Watches VMs and, by label, the objects that belong to them (StatefulSets, ConfigMaps, Pods,
 * display Secrets) in the given namespaces (all when undefined), with client-node informers:
 * list, then watch from that resourceVersion. A watch that fails (the apiserver restarting,
 * 429s under load) is restarted with backoff, never ending the process.
 */
export function createWatchEdge(
  kubeConfig: KubeConfig,
  namespaces: readonly string[] | undefined,
  sink: KeySink,
  logger: Logger,
): WatchEdge {
  const specs = (namespaces ?? [undefined]).flatMap((namespace) => watchSpecs(kubeConfig, namespace));
  let stopped = false;
  const timers = new Set<NodeJS.Timeout>();

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

  const informers = specs.map((spec) => {
    const informer: Informer<KubernetesObject> = makeInformer(
      kubeConfig,
      spec.path,
      spec.list,
      spec.labelSelector,
    );
    informer.on('add', forward(spec, 'added'));
    informer.on('update', forward(spec, 'updated'));
    informer.on('delete', forward(spec, 'deleted'));
    let failures = 0;
    informer.on('connect', () => (failures = 0));
    informer.on('error', (err: unknown) => {
      if (stopped) return;
      const delay = Math.min(RESTART_CAP_MS, RESTART_BASE_MS * 2 ** failures++);
      logger.warn({ err: String(err), path: spec.path, retryInMs: delay }, 'watch failed; restarting it');
      const timer = setTimeout(() => {
        timers.delete(timer);
        if (!stopped) informer.start().catch(() => undefined); // failures come back through 'error'
      }, delay);
      timers.add(timer);
    });
    return { spec, informer };
  });

  return {
    async start() {
      await Promise.all(
        informers.map(async ({ spec, informer }) => {
          await informer.start();
          logger.info({ kind: spec.kind, path: spec.path }, 'watching');
        }),
      );
    },
    async stop() {
      stopped = true;
      for (const timer of timers) clearTimeout(timer);
      await Promise.all(informers.map(({ informer }) => informer.stop()));
    },
  };
}
