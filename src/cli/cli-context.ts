// What the user-facing commands (`vmop vm`, `vmop image`) share: the cluster from the kubeconfig,
// durations, and refusals as one readable line.
import { CoreV1Api, CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node';
import { InvalidArgumentError } from 'commander';
import { readableApiError } from '../kube/clients.js';
import { loadKubeConfig } from '../kube/config.js';
import { CliFailure, reportFailure } from './failure.js';

export interface KubeCliOptions {
  kubeconfig?: string;
  namespace?: string;
}

export function parseTimeout(value: string): number {
  const match = /^(\d+)(ms|s|m|h)?$/.exec(value.trim());
  if (!match) throw new InvalidArgumentError('a duration such as 90s, 5m or 1h');
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[(match[2] ?? 's') as 'ms' | 's' | 'm' | 'h'];
  return Number(match[1]) * unit;
}

/** The kubeconfig's cluster, its clients, and the namespace (-n, else the context's, else default). */
export function context(options: KubeCliOptions) {
  const kubeConfig: KubeConfig = loadKubeConfig(options.kubeconfig);
  const namespace =
    options.namespace ?? kubeConfig.getContextObject(kubeConfig.getCurrentContext())?.namespace ?? 'default';
  return {
    kubeConfig,
    api: kubeConfig.makeApiClient(CustomObjectsApi),
    core: kubeConfig.makeApiClient(CoreV1Api),
    namespace,
  };
}

/** Runs a subcommand, turning the apiserver's refusals into one readable line. */
export function cliAction(command: string) {
  return <A extends unknown[]>(run: (...args: A) => Promise<void>) =>
    async (...args: A) => {
      try {
        await run(...args);
      } catch (err) {
        // Refused or failed: its reason, not the usage text (the command was typed right).
        if (err instanceof CliFailure) reportFailure(err.message);
        else reportFailure(`${command}: ${(readableApiError(err) as Error).message}`);
      }
    };
}
