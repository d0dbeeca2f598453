// Copies of provisioning Secrets (cloud-init, sysprep): a snapshot keeps the VM's as they were at
// the cut, a clone's VM gets its own from the snapshot's. Data and type copied as they are; nothing
// of them is logged.
import type { V1OwnerReference, V1Secret } from '@kubernetes/client-node';
import { isNotFound, type KubeClients, createUnlessExists } from '../kube/clients.js';

export interface SecretCopy {
  /** The Secret copied. */
  from: string;
  /** The copy. */
  to: string;
}

/**
 * Makes each copy that does not exist yet. Returns the copies made, or the first Secret that does
 * not exist (then nothing more is copied).
 */
export async function copySecrets(
  clients: KubeClients,
  namespace: string,
  copies: SecretCopy[],
  metadata: { labels: Record<string, string>; ownerReferences?: V1OwnerReference[] },
): Promise<{ made: string[]; missing?: string }> {
  const made: string[] = [];
  for (const { from, to } of copies) {
    let source: V1Secret;
    try {
      source = await clients.core.readNamespacedSecret({ namespace, name: from });
    } catch (err) {
      if (isNotFound(err)) return { made, missing: from };
      throw err;
    }
    const body: V1Secret = {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: to, namespace, ...metadata },
      ...(source.type && { type: source.type }),
      ...(source.data && { data: source.data }),
    };
    if (await createUnlessExists(() => clients.core.createNamespacedSecret({ namespace, body })))
      made.push(`Secret ${to} (a copy of ${from})`);
  }
  return { made };
}
