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

/** Resolves to undefined when the object does not exist. */
export async function readOptional<T>(read: () => Promise<T>): Promise<T | undefined> {
  try {
    return await read();
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}
