// A list+watch cache of one kind of object that outlives failed watches: client-node's ListWatch
// (which takes a field selector, unlike makeInformer), restarted with backoff after every error.
import {
  ListWatch,
  Watch,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
} from '@kubernetes/client-node';
import { backoffDelay } from '../queue/backoff.js';
import type { Logger } from '../util/logger.js';

const RESTART_BACKOFF = { baseMs: 500, capMs: 30_000 };

export interface WatchSpec<T extends KubernetesObject> {
  /** The API path of the collection, e.g. /api/v1/namespaces/ns/configmaps. */
  path: string;
  list: () => Promise<KubernetesListObject<T>>;
  labelSelector?: string;
  fieldSelector?: string;
}

export interface WatchHandlers<T> {
  /** Added or changed. */
  upsert?(object: T): void;
  deleted?(object: T): void;
}

export interface ObjectWatch<T> {
  /** Resolves once the first list is in the cache. */
  start(): Promise<void>;
  stop(): Promise<void>;
  get(name: string, namespace?: string): T | undefined;
}

export function watchObjects<T extends KubernetesObject>(
  kubeConfig: KubeConfig,
  spec: WatchSpec<T>,
  handlers: WatchHandlers<T>,
  logger: Logger,
): ObjectWatch<T> {
  const informer = new ListWatch<T>(
    spec.path,
    new Watch(kubeConfig),
    spec.list,
    false,
    spec.labelSelector,
    spec.fieldSelector,
  );
  if (handlers.upsert) {
    informer.on('add', handlers.upsert);
    informer.on('update', handlers.upsert);
  }
  if (handlers.deleted) informer.on('delete', handlers.deleted);
  let stopped = false;
  let failures = 0;
  let timer: NodeJS.Timeout | undefined;
  informer.on('connect', () => (failures = 0));
  informer.on('error', (err: unknown) => {
    if (stopped) return;
    const delay = backoffDelay(++failures, RESTART_BACKOFF);
    logger.warn({ err: String(err), path: spec.path, retryInMs: delay }, 'watch failed; restarting it');
    timer = setTimeout(() => {
      if (!stopped) informer.start().catch(() => undefined); // failures come back through 'error'
    }, delay);
  });
  return {
    start: () => informer.start(),
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await informer.stop();
    },
    get: (name, namespace) => informer.get(name, namespace),
  };
}
