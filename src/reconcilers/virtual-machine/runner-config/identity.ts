// What a runner is given: its namespace's Redis credential (api/tenant-redis.ts), and a
// ServiceAccount with no rights and no token (status flows back through Redis, so a runner never
// talks to the apiserver).
import type { V1Secret, V1ServiceAccount } from '@kubernetes/client-node';
import type { TenantRedisUrls } from '../../../api/tenant-redis.js';
import { APP_NAME, LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_NAME, MANAGED_BY } from '../naming.js';

/** VM-Operator's name for the runners' ServiceAccount; one per namespace, shared by its VMs. */
export const RUNNER_SERVICE_ACCOUNT = 'vm-runner';

export function desiredRunnerServiceAccount(namespace: string): V1ServiceAccount {
  return {
    apiVersion: 'v1',
    kind: 'ServiceAccount',
    metadata: {
      name: RUNNER_SERVICE_ACCOUNT,
      namespace,
      labels: { [LABEL_NAME]: APP_NAME, [LABEL_MANAGED_BY]: MANAGED_BY },
    },
    automountServiceAccountToken: false,
  };
}

/** The key of the runner Secret that holds the Redis URL (with the runners' credential). */
export const RUNNER_REDIS_URL_KEY = 'url';
/** The key that holds the importers' Redis URL (a narrower credential: import progress only). */
export const IMPORTER_REDIS_URL_KEY = 'importer-url';

/**
 * `vm-runner-redis`: where the runners publish their state. One per namespace, like the runners'
 * ServiceAccount, since every runner of a namespace has the same credential (vmop 0.x wrote one per VM,
 * `<vm>-runner-redis`, owned by the VM: those stay until their VM goes, as running pods name them).
 */
export const RUNNER_SECRET = 'vm-runner-redis';

/**
 * The Secret the runner pods read their Redis URL from. The manager writes it into each namespace
 * with VMs (also one made after the install), so a VM gets the runner credential without a user step.
 */
export function desiredRunnerSecret(namespace: string, urls: TenantRedisUrls): V1Secret {
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: {
      name: RUNNER_SECRET,
      namespace,
      labels: { [LABEL_NAME]: APP_NAME, [LABEL_MANAGED_BY]: MANAGED_BY, [LABEL_COMPONENT]: 'runner-redis' },
    },
    type: 'Opaque',
    // `data`, not `stringData`: what is read back compares equal, so an unchanged Secret is not rewritten.
    data: {
      [RUNNER_REDIS_URL_KEY]: Buffer.from(urls.runner).toString('base64'),
      [IMPORTER_REDIS_URL_KEY]: Buffer.from(urls.importer).toString('base64'),
    },
  };
}

/** What every runner, importer and attach pod of the namespace names: made before the first of them. */
export function runnerIdentity(namespace: string, urls: TenantRedisUrls): [V1Secret, V1ServiceAccount] {
  return [desiredRunnerSecret(namespace, urls), desiredRunnerServiceAccount(namespace)];
}
