import { KubeConfig } from '@kubernetes/client-node';

/** A kubeconfig file when given, else $KUBECONFIG, ~/.kube/config or the in-cluster service account. */
export function loadKubeConfig(path: string | undefined): KubeConfig {
  const kubeConfig = new KubeConfig();
  if (path) kubeConfig.loadFromFile(path);
  else kubeConfig.loadFromDefault();
  return kubeConfig;
}
