import {
  ApiException,
  AppsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubernetesObjectApi,
  type KubeConfig,
} from '@kubernetes/client-node';

/** The typed API clients a reconciler uses, made once per process. */
export interface KubeClients {
  core: CoreV1Api;
  apps: AppsV1Api;
  customObjects: CustomObjectsApi;
  objects: KubernetesObjectApi;
}

export function makeKubeClients(kubeConfig: KubeConfig): KubeClients {
  return {
    core: kubeConfig.makeApiClient(CoreV1Api),
    apps: kubeConfig.makeApiClient(AppsV1Api),
    customObjects: kubeConfig.makeApiClient(CustomObjectsApi),
    objects: KubernetesObjectApi.makeApiClient(kubeConfig),
  };
}

export function isNotFound(err: unknown): boolean {
  return err instanceof ApiException && err.code === 404;
}

/** The object exists already (a create), or was changed meanwhile (an update with a resourceVersion). */
export function isConflict(err: unknown): boolean {
  return err instanceof ApiException && err.code === 409;
}

/** Runs a write; whether it was done (false when it failed as `benign` allows: made, or gone, already). */
export async function doneUnless(
  write: () => Promise<unknown>,
  benign: (err: unknown) => boolean,
): Promise<boolean> {
  try {
    await write();
    return true;
  } catch (err) {
    if (benign(err)) return false;
    throw err;
  }
}

/** Creates an object unless it exists (another replica made it, or this one before a failure); whether it made it. */
export const createUnlessExists = (create: () => Promise<unknown>) => doneUnless(create, isConflict);

/** Deletes an object, or finds it gone already; whether it deleted it. */
export const deleteUnlessGone = (remove: () => Promise<unknown>) => doneUnless(remove, isNotFound);

/**
 * Deletes the pod only if it is still the one with `uid`; false when it is gone or was replaced
 * meanwhile (the uid precondition failed).
 */
export async function deletePodByUid(
  core: CoreV1Api,
  pod: { name: string; namespace: string; uid: string },
  options: { gracePeriodSeconds?: number } = {},
): Promise<boolean> {
  try {
    await core.deleteNamespacedPod({
      name: pod.name,
      namespace: pod.namespace,
      body: { preconditions: { uid: pod.uid }, ...options },
    });
    return true;
  } catch (err) {
    if (isNotFound(err) || isConflict(err)) return false;
    throw err;
  }
}

/** Resolves to undefined when the object does not exist. */
export async function readOptional<T>(read: () => Promise<T>): Promise<T | undefined> {
  try {
    return await read();
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

/**
 * client-node's ApiException says "Unknown API Status Code!" for most codes; this says the code
 * and the apiserver's own message, for logs and `vmop queue show`. Other errors pass unchanged.
 */
export function readableApiError(err: unknown): unknown {
  if (!(err instanceof ApiException)) return err;
  return new Error(`HTTP ${err.code} from the apiserver: ${statusMessage(err.body) ?? String(err.body)}`);
}

function statusMessage(body: unknown): string | undefined {
  try {
    const status = (typeof body === 'string' ? JSON.parse(body) : body) as { message?: unknown };
    return typeof status?.message === 'string' ? status.message : undefined;
  } catch {
    return undefined;
  }
}

/** What the apiserver says of a refused request (its Status), as far as callers read it. */
export interface RefusalStatus {
  reason?: string;
  message?: string;
  details?: { causes?: Array<{ field?: string; message?: string }> };
}

/**
 * The Status of a request the apiserver refused for what was asked (a 4xx other than an expired
 * login): the object invalid, refused by a policy, its name taken. Undefined for anything else.
 */
export function refusalStatus(err: unknown): RefusalStatus | undefined {
  if (!(err instanceof ApiException) || err.code < 400 || err.code >= 500 || err.code === 401)
    return undefined;
  try {
    return ((typeof err.body === 'string' ? JSON.parse(err.body) : err.body) as RefusalStatus | null) ?? {};
  } catch {
    return {};
  }
}

/** Codes a retry can fix: auth that may be renewed, a gone object, a conflict, throttling. */
const RETRYABLE_CLIENT_ERRORS = new Set([401, 404, 408, 409, 429]);

/**
 * The apiserver's message when it refused a request in a way no retry can fix (a 4xx such as 400
 * or 422 for an invalid object, 403 for a forbidden write); undefined for anything else.
 */
export function apiserverRejection(err: unknown): string | undefined {
  if (!(err instanceof ApiException) || err.code < 400 || err.code >= 500) return undefined;
  if (RETRYABLE_CLIENT_ERRORS.has(err.code)) return undefined;
  return statusMessage(err.body) ?? `HTTP ${err.code}`;
}
