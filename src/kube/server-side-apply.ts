// vmop's desired objects, written by server-side apply, and not at all when the current one (from
// the watch cache) already has all of it: an unchanged object costs no request.
import { PatchStrategy, type KubernetesObject } from '@kubernetes/client-node';
import type { KubeClients } from './clients.js';
import { isSubset } from './subset.js';

/** The applied object, if written. */
export async function applyUnlessPresent<T extends KubernetesObject>(
  clients: KubeClients,
  fieldManager: string,
  object: T,
  current: T | undefined,
): Promise<T | undefined> {
  if (current && isSubset(object, current)) return undefined;
  return (await clients.objects.patch(
    object,
    undefined,
    undefined,
    fieldManager,
    true,
    PatchStrategy.ServerSideApply,
  )) as T;
}
