import type { Agent } from 'node:http';
import type { AgentOptions } from 'node:https';
import { KubeConfig, type Cluster } from '@kubernetes/client-node';

/** A kubeconfig file when given, else $KUBECONFIG, ~/.kube/config or the in-cluster service account. */
export function loadKubeConfig(path: string | undefined): KubeConfig {
  const kubeConfig = new KubeConfig();
  if (path) kubeConfig.loadFromFile(path);
  else kubeConfig.loadFromDefault();
  return reuseConnections(kubeConfig);
}

/**
 * client-node 1.x builds a new https.Agent for every request, so every request opens a new TLS
 * connection to the apiserver (2.x caches agents, but needs Node 22). This gives the kubeconfig
 * one keep-alive agent per cluster and user, as 2.x does.
 */
export function reuseConnections(kubeConfig: KubeConfig): KubeConfig {
  const patchable = kubeConfig as unknown as {
    createAgent?: (cluster: Cluster | null, options: AgentOptions) => Agent;
  };
  const create = patchable.createAgent?.bind(kubeConfig);
  if (!create) return kubeConfig; // a client-node that no longer has it
  const agents = new Map<string, Agent>();
  patchable.createAgent = (cluster, options) => {
    const key = JSON.stringify([cluster?.name, cluster?.server, kubeConfig.getCurrentUser()?.name]);
    let agent = agents.get(key);
    if (!agent) {
      agent = create(cluster, { ...options, keepAlive: true });
      agents.set(key, agent);
    }
    return agent;
  };
  return kubeConfig;
}
