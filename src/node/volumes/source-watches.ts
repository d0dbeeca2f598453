// Watches of the single ConfigMaps and Secrets that pods' volumes project (a field selector per
// object, as kubelet watches them), shared between the pods that use one and closed with the last.
import {
  CoreV1Api,
  type KubeConfig,
  type KubernetesObject,
  type V1ConfigMap,
  type V1Secret,
} from '@kubernetes/client-node';
import type { Logger } from '../../util/logger.js';
import { watchObjects, type ObjectWatch } from '../../kube/watch.js';

export interface Subscription<T> {
  /** The object as last seen; undefined while it does not exist. */
  current(): T | undefined;
  close(): Promise<void>;
}

interface Shared {
  watch: ObjectWatch<KubernetesObject>;
  started: Promise<void>;
  listeners: Set<() => void>;
}

export class SourceWatches {
  private readonly core: CoreV1Api;
  private readonly shared = new Map<string, Shared>();

  constructor(
    private readonly kubeConfig: KubeConfig,
    private readonly logger: Logger,
  ) {
    this.core = kubeConfig.makeApiClient(CoreV1Api);
  }

  configMap(namespace: string, name: string, onChange: () => void): Promise<Subscription<V1ConfigMap>> {
    const list = () =>
      this.core.listNamespacedConfigMap({ namespace, fieldSelector: `metadata.name=${name}` });
    return this.subscribe('configmaps', namespace, name, list, onChange);
  }

  secret(namespace: string, name: string, onChange: () => void): Promise<Subscription<V1Secret>> {
    const list = () => this.core.listNamespacedSecret({ namespace, fieldSelector: `metadata.name=${name}` });
    return this.subscribe('secrets', namespace, name, list, onChange);
  }

  private async subscribe<T extends KubernetesObject>(
    plural: string,
    namespace: string,
    name: string,
    list: () => Promise<{ items: T[] }>,
    onChange: () => void,
  ): Promise<Subscription<T>> {
    const key = `${plural}/${namespace}/${name}`;
    let entry = this.shared.get(key);
    if (!entry) {
      const listeners = new Set<() => void>();
      const notify = () => listeners.forEach((listener) => listener());
      const watch = watchObjects<KubernetesObject>(
        this.kubeConfig,
        {
          path: `/api/v1/namespaces/${namespace}/${plural}`,
          list: list as () => Promise<{ items: KubernetesObject[] }>,
          fieldSelector: `metadata.name=${name}`,
        },
        { upsert: notify, deleted: notify },
        this.logger,
      );
      entry = { watch, started: watch.start(), listeners };
      this.shared.set(key, entry);
    }
    const shared = entry;
    shared.listeners.add(onChange);
    try {
      await shared.started;
    } catch (err) {
      await this.release(key, shared, onChange);
      throw err;
    }
    return {
      current: () => shared.watch.get(name, namespace) as T | undefined,
      close: () => this.release(key, shared, onChange),
    };
  }

  private async release(key: string, shared: Shared, listener: () => void): Promise<void> {
    shared.listeners.delete(listener);
    if (shared.listeners.size > 0 || this.shared.get(key) !== shared) return;
    this.shared.delete(key);
    await shared.watch.stop();
  }

  async stop(): Promise<void> {
    const all = [...this.shared.values()];
    this.shared.clear();
    await Promise.all(all.map((shared) => shared.watch.stop()));
  }
}
