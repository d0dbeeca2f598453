import {
  createConfiguration,
  KubeConfig,
  ServerConfiguration,
  type ApiConstructor,
  type ApiType,
} from '@kubernetes/client-node';
import { pooledHttpLibrary, type PooledHttpOptions } from './pooled-http.js';

/** A KubeConfig whose API clients share pooled keep-alive connections (pooled-http.ts). */
export class PooledKubeConfig extends KubeConfig {
  private readonly httpApi: ReturnType<typeof pooledHttpLibrary>;

  constructor(options: PooledHttpOptions = {}) {
    super();
    this.httpApi = pooledHttpLibrary(options);
  }

  override makeApiClient<T extends ApiType>(apiClientType: ApiConstructor<T>): T {
    const cluster = this.getCurrentCluster();
    if (!cluster) throw new Error('No active cluster!');
    return new apiClientType(
      createConfiguration({
        baseServer: new ServerConfiguration(cluster.server, {}),
        authMethods: { default: this },
        httpApi: this.httpApi,
      }),
    );
  }
}

/** What client-node falls back to when it finds no kubeconfig at all (an http apiserver on localhost). */
const FALLBACK_SERVER = 'http://localhost:8080';

/**
 * A kubeconfig file when given, else $KUBECONFIG, ~/.kube/config or the in-cluster service account;
 * with none of them, an error that says so (as kubectl does), not client-node's localhost fallback.
 */
export function loadKubeConfig(path: string | undefined): KubeConfig {
  const kubeConfig = new PooledKubeConfig();
  if (path) kubeConfig.loadFromFile(path);
  else kubeConfig.loadFromDefault();
  if (
    !path &&
    kubeConfig.getCurrentCluster()?.server === FALLBACK_SERVER &&
    kubeConfig.getCurrentUser()?.name === 'user'
  )
    throw new Error(
      'no kubeconfig found: give --kubeconfig, set KUBECONFIG, or write ~/.kube/config (nor does this run in a pod)',
    );
  return kubeConfig;
}
