// The reconcile of one VirtualMachineClass key: a class keeps the finalizer `class-in-use` while it
// exists, so deleting it waits until no VM uses it any more (deleted, or moved to another class);
// its status says which VMs use it and whether it is a usable default.
import { isDeepStrictEqual } from 'node:util';
import type { KubernetesObject, V1Pod } from '@kubernetes/client-node';
import {
  CLASS_IN_USE_FINALIZER,
  CLASS_LABEL,
  CLASS_PLURAL,
  VirtualMachineClass,
  isDefaultClass,
} from '../../api/virtual-machine-class.js';
import { GROUP, KIND, VERSION, VirtualMachine } from '../../api/virtual-machine.js';
import type { KubeClients } from '../../kube/clients.js';
import { mergePatch, statusPatch } from '../../kube/merge-patch.js';
import type { ObjectCache } from '../../kube/object-cache.js';
import type { HandlerResult } from '../../queue/index.js';
import type { Logger } from '../../util/logger.js';
import { nextCondition } from '../conditions.js';
import { cachedClasses, chooseClass } from '../virtual-machine/class/vm-class.js';
import { LABEL_INSTANCE } from '../virtual-machine/naming.js';

export interface ClassReconcilerOptions {
  clients: KubeClients;
  cache: ObjectCache;
  logger: Logger;
  now?: () => Date;
}

/** At most this many users are named in the status (all are counted). */
const LISTED_USERS = 10;

export function createClassReconciler(options: ClassReconcilerOptions) {
  const { clients, cache } = options;
  const now = options.now ?? (() => new Date());
  return async (key: string): Promise<HandlerResult> => {
    const name = key.slice('vmclass:'.length);
    const all = cachedClasses(cache);
    const vmClass = all.find((c) => c.metadata.name === name);
    if (!vmClass) return;
    // VMs that name the class, or take it as the default, and those whose runner pods were made
    // from it (also from a default class that is being deleted, which VMs take no more).
    const users = [
      ...new Set([
        ...cache
          .list<KubernetesObject>(KIND, undefined)
          .flatMap((cached) => VirtualMachine.safeParse(cached).data ?? [])
          .filter((vm) => usesClass(vm, vmClass, all))
          .map((vm) => `${vm.metadata.namespace}/${vm.metadata.name}`),
        ...cache
          .list<V1Pod>('Pod', undefined, { [CLASS_LABEL]: name })
          .map((pod) => `${pod.metadata!.namespace}/${pod.metadata!.labels![LABEL_INSTANCE]}`),
      ]),
    ].sort();
    const ref = { group: GROUP, version: VERSION, plural: CLASS_PLURAL, name };
    const finalizers = vmClass.metadata.finalizers ?? [];
    const keep = !vmClass.metadata.deletionTimestamp || users.length > 0;
    if (keep !== finalizers.includes(CLASS_IN_USE_FINALIZER)) {
      const wanted = keep
        ? [...finalizers, CLASS_IN_USE_FINALIZER]
        : finalizers.filter((f) => f !== CLASS_IN_USE_FINALIZER);
      // The resourceVersion makes a concurrent change of the finalizers fail (and retry) rather than lose.
      await clients.customObjects.patchClusterCustomObject(
        {
          ...ref,
          body: { metadata: { finalizers: wanted, resourceVersion: vmClass.metadata.resourceVersion } },
        },
        mergePatch,
      );
      if (!keep) return;
    }
    const otherDefaults = isDefaultClass(vmClass)
      ? all.filter((c) => c !== vmClass && isDefaultClass(c)).map((c) => c.metadata.name)
      : [];
    const at = now();
    const status = {
      usedBy: users.slice(0, LISTED_USERS),
      usedByCount: users.length,
      observedGeneration: vmClass.metadata.generation,
      conditions: [
        nextCondition(
          vmClass.status?.conditions,
          {
            type: 'InUse',
            status: users.length > 0 ? 'True' : 'False',
            reason: users.length > 0 ? 'UsedByVirtualMachines' : 'Unused',
            message:
              users.length === 0
                ? 'no VM uses the class'
                : `${users.length} VM(s) use the class${vmClass.metadata.deletionTimestamp ? ': it is deleted once none does' : ''}`,
          },
          at,
        ),
        nextCondition(
          vmClass.status?.conditions,
          {
            type: 'Ready',
            status: otherDefaults.length > 0 ? 'False' : 'True',
            reason: otherDefaults.length > 0 ? 'SeveralDefaults' : 'Ready',
            message:
              otherDefaults.length > 0
                ? `also marked default: ${otherDefaults.join(', ')}; VMs that name no class run with none until one default is left`
                : 'VMs of the class can run',
          },
          at,
        ),
      ],
    };
    // Unchanged: no write (a merge patch of the whole status would always look like one).
    if (isDeepStrictEqual(JSON.parse(JSON.stringify(status)), vmClass.status ?? {})) return;
    await clients.customObjects.patchClusterCustomObjectStatus(
      { ...ref, body: { status: statusPatch(vmClass.status, status) } },
      mergePatch,
    );
  };
}

const usesClass = (vm: VirtualMachine, vmClass: VirtualMachineClass, all: VirtualMachineClass[]) =>
  vm.spec.vm.virtualMachineClassName === vmClass.metadata.name ||
  (!vm.spec.vm.virtualMachineClassName && chooseClass(vm, all).class === vmClass);
