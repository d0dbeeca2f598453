// A list+watch cache of one kind of object that outlives failed watches: client-node's ListWatch
// (which takes a field selector, unlike makeInformer), restarted with backoff after every error.
import {
  ListWatch,
  Watch,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
} from '@kubernetes/client-node';
import { backoffDelay, type Backoff } from '../queue/backoff.js';
import { LabelIndex } from './label-index.js';
import { hasLabels } from './object-cache.js';
import type { Logger } from '../util/logger.js';

export interface WatchRestartOptions {
  /** Delays between restarts of a failing watch. The cap bounds how long after an outage the cache catches up. */
  backoff: Backoff;
  /** A watch up this long ended a failure series: the next failure is a new outage. */
  stayedUpMs: number;
}

export const WATCH_RESTART: WatchRestartOptions = {
  backoff: { baseMs: 500, capMs: 10_000 },
  stayedUpMs: 30_000,
};

export interface WatchSpec<T extends KubernetesObject> {
  /** The API path of the collection, e.g. /api/v1/namespaces/ns/configmaps. */
  path: string;
  list: () => Promise<KubernetesListObject<T>>;
  labelSelector?: string;
  fieldSelector?: string;
  /** Labels whose values are indexed, so that listing by them does not scan the namespace. */
  indexLabels?: readonly string[];
}

export interface WatchHandlers<T> {
  /** Called first for every object put in the cache; may drop what nobody reads (it changes the cached object). */
  trim?(object: T): void;
  /** Added or changed. */
  upsert?(object: T): void;
  deleted?(object: T): void;
}

export interface ObjectWatch<T> {
  /** Resolves once the first list is in the cache. */
  start(): Promise<void>;
  stop(): Promise<void>;
  get(name: string, namespace?: string): T | undefined;
  /** The cached objects, of one namespace or of all, whose labels include all of `labels`. */
  list(namespace?: string, labels?: Record<string, string>): T[];
}

export function watchObjects<T extends KubernetesObject>(
  kubeConfig: KubeConfig,
  spec: WatchSpec<T>,
  handlers: WatchHandlers<T>,
  logger: Logger,
  restartOptions: WatchRestartOptions = WATCH_RESTART,
): ObjectWatch<T> {
  const informer = new ListWatch<T>(
    spec.path,
    new Watch(kubeConfig),
    spec.list,
    false,
    spec.labelSelector,
    spec.fieldSelector,
  );
  if (handlers.trim) {
    informer.on('add', handlers.trim);
    informer.on('update', handlers.trim);
  }
  // Before the other handlers, so that one listing by label sees the object.
  const index = new LabelIndex(spec.indexLabels ?? []);
  informer.on('add', (object) => index.upsert(object));
  informer.on('update', (object) => index.upsert(object));
  informer.on('delete', (object) => index.delete(object));
  if (handlers.upsert) {
    informer.on('add', handlers.upsert);
    informer.on('update', handlers.upsert);
  }
  if (handlers.deleted) informer.on('delete', handlers.deleted);
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  // One outage: from the first failure until a restart lists and watches again. The failure count
  // (and so the back-off) starts again only for a watch that stayed up; client-node's 'connect'
  // fires before each attempt, so it cannot tell.
  let failures = 0;
  let outageStart = 0;
  let upSince = Date.now();
  const restart = async () => {
    if (stopped) return;
    const failuresBefore = failures;
    await informer.start().catch(() => undefined); // failures come back through 'error'
    if (stopped || failures !== failuresBefore) return;
    upSince = Date.now();
    logger.info({ path: spec.path, failures, outageMs: upSince - outageStart }, 'watch restored');
  };
  informer.on('error', (err: unknown) => {
    if (stopped) return;
    if (upSince > 0 && Date.now() - upSince >= restartOptions.stayedUpMs) failures = 0;
    upSince = 0;
    const delay = backoffDelay(++failures, restartOptions.backoff);
    if (failures === 1) {
      outageStart = Date.now();
      logger.warn(
        { err: String(err), path: spec.path, retryInMs: delay },
        'watch failed; restarting it with back-off',
      );
    } else {
      logger.debug({ err: String(err), path: spec.path, failures, retryInMs: delay }, 'watch failed again');
    }
    timer = setTimeout(() => void restart(), delay);
  });
  return {
    start: () => informer.start(),
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await informer.stop();
    },
    get: (name, namespace) => informer.get(name, namespace),
    list(namespace, labels = {}) {
      const names = namespace === undefined ? undefined : index.candidates(namespace, labels);
      const objects = names
        ? [...names].flatMap((name) => informer.get(name, namespace) ?? [])
        : informer.list(namespace);
      return objects.filter((object) => hasLabels(object, labels));
    },
  };
}
