// The idempotent reconcile of one VirtualMachine key: observe (observe.ts), plan (plan.ts), then
// the named steps in their order (steps.ts), and report. This file keeps what a replica
// holds between reconciles: its own newest writes of VMs, and writes shared by many reconciles.
import type { KubernetesObject } from '@kubernetes/client-node';
import { setTimeout as sleep } from 'node:timers/promises';
import { KIND, type VirtualMachine } from '../../api/virtual-machine.js';
import { operationApiRef, type VirtualMachineOperation } from '../../api/virtual-machine-operation.js';
import { isConflict } from '../../kube/clients.js';
import { applyUnlessPresent } from '../../kube/server-side-apply.js';
import { isSubset } from '../../kube/subset.js';
import { TerminalError, type HandlerResult } from '../../queue/index.js';
import { eventObjectOf, eventRecorder } from '../events.js';
import { FIELD_MANAGER, parseVmKey } from './naming.js';
import { observeVm, STALE_CACHE } from './observe.js';
import { runSteps, STATUS_CONFLICT, type ReconcileEnd } from './pipeline.js';
import { planVm } from './plan.js';
import { rejectionMessage } from './status/derive.js';
import { VM_STEPS } from './steps.js';
import type { VmIo, VmReconcilerOptions, VmState } from './vm-state.js';

export type { VmReconcilerOptions } from './vm-state.js';

/** How long vmop's own last write of a VM stands in for the cache, which has it by then. */
const OWN_WRITE_TTL_MS = 5_000;

/**
 * resourceVersions from etcd are increasing integers; relied on only to prefer vmop's own newer
 * write of a VM to its cached copy, or to wait for the cache after a refused write.
 */
type Versioned = { metadata?: { resourceVersion?: string } } | undefined;
const isNewer = (a: Versioned, b: Versioned) =>
  Number(a?.metadata?.resourceVersion) > Number(b?.metadata?.resourceVersion);

export function createVmReconciler(options: VmReconcilerOptions) {
  const { clients, cache, logger } = options;
  const now = options.now ?? (() => new Date());

  /**
   * The VMs as this replica last wrote them (the status patch's answer), until its watch brings
   * them: the next reconcile, e.g. for the runner's next snapshot, must not start from before it.
   */
  const ownWrites = new Map<string, KubernetesObject>();
  function rememberOwnWrite(key: string, vm: KubernetesObject) {
    ownWrites.set(key, vm);
    setTimeout(() => ownWrites.get(key) === vm && ownWrites.delete(key), OWN_WRITE_TTL_MS).unref();
  }

  /** The VM: vmop's own write while the cache is older, else the cached one. */
  function cachedVm(key: string, namespace: string, name: string): KubernetesObject | undefined {
    const cached = cache.get<KubernetesObject>(KIND, namespace, name);
    const own = ownWrites.get(key);
    if (own && own.metadata?.uid === cached?.metadata?.uid && isNewer(own, cached)) return own;
    return cached;
  }

  /** The cached VM, once the cache has the newest spec generation any replica has seen. */
  async function freshVm(key: string, namespace: string, name: string) {
    const cached = () => cachedVm(key, namespace, name);
    let raw = cached();
    const uid = raw?.metadata?.uid;
    if (!raw || !uid || !options.newestGeneration) return { raw };
    const newest = await options.newestGeneration(key, uid);
    for (let waited = 0; (raw?.metadata?.generation ?? 0) < newest; waited += STALE_CACHE.pollMs) {
      if (waited >= STALE_CACHE.waitMs) return { raw: undefined, stale: true };
      await sleep(STALE_CACHE.pollMs);
      raw = cached();
    }
    return { raw };
  }

  /** Server-side applies `object` unless `current` has it already; returns the applied object, if written. */
  const apply = <T extends KubernetesObject>(object: T, current: T | undefined) =>
    applyUnlessPresent(clients, FIELD_MANAGER, object, current);

  /**
   * apply() for an object of the namespace that all its VMs need: reconciles of many new VMs at
   * once, before the watch has it, write it once (per replica), not once each.
   */
  const sharedApplies = new Map<string, Promise<KubernetesObject | undefined>>();
  function applyShared<T extends KubernetesObject>(object: T, current: T | undefined) {
    if (current && isSubset(object, current)) return Promise.resolve(undefined);
    const id = `${object.kind}/${object.metadata!.namespace}/${object.metadata!.name}`;
    const pending = sharedApplies.get(id);
    if (pending) return pending.then(() => undefined); // written by the reconcile that started it
    const applying = apply(object, undefined).finally(() => sharedApplies.delete(id));
    sharedApplies.set(id, applying);
    return applying;
  }

  /** Creates an operation; false when it exists already (made by an earlier reconcile or another replica). */
  async function createOperation(operation: VirtualMachineOperation): Promise<boolean> {
    try {
      await clients.customObjects.createNamespacedCustomObject({
        ...operationApiRef(operation.metadata.namespace!),
        body: operation,
      });
      return true;
    } catch (err) {
      if (isConflict(err)) return false;
      throw err;
    }
  }

  const record = eventRecorder(clients, logger, now);
  const ioFor = (key: string, namespace: string, name: string): VmIo => ({
    clients,
    cache,
    options,
    logger,
    now,
    apply,
    applyShared,
    createOperation,
    rememberOwnWrite: (vm) => rememberOwnWrite(key, vm),
    async waitForNewerVm(vm) {
      for (let waited = 0; waited < STALE_CACHE.waitMs; waited += STALE_CACHE.pollMs) {
        if (isNewer(cachedVm(key, namespace, name), vm)) return;
        await sleep(STALE_CACHE.pollMs);
      }
    },
  });

  return async function reconcileVirtualMachine(key: string): Promise<HandlerResult> {
    for (let attempt = 1; ; attempt++) {
      const result = await reconcileOnce(key);
      if (result !== STATUS_CONFLICT) return result;
      if (attempt >= STALE_CACHE.attempts) {
        // Said once per round: a cache that keeps lagging leaves the status stale (issue 54's note).
        logger.warn(
          { key, attempts: attempt },
          'the status write kept conflicting: the VM is looked at again',
        );
        return { requeueAfter: STALE_CACHE.retryMs };
      }
    }
  };

  async function reconcileOnce(key: string): Promise<ReconcileEnd> {
    const { namespace, name } = parseVmKey(key);
    const named = (cachedVm(key, namespace, name) as VirtualMachine | undefined)?.status?.runnerPod?.name;
    const seen = await observeVm(key, namespace, name, named, { ...options, freshVm, logger, now });
    if ('end' in seen) return seen.end;
    const plan = planVm(seen, options);
    const state: VmState = {
      seen,
      plan,
      io: ioFor(key, namespace, name),
      specErrors: plan.specErrors,
      podPlan: plan.podPlan,
      pod: plan.pod,
    };
    const recordEvent = (event: Parameters<typeof record>[1]) => {
      options.onTransition?.(event, state.status ?? seen.vm.status);
      return record(eventObjectOf(seen.vm), event);
    };
    const outcome = await runSteps(VM_STEPS, state, recordEvent);
    if (outcome.end !== undefined) return outcome.end;
    // A status write alone is routine (a runner's every snapshot brings one): debug, not info.
    const { writes } = outcome;
    if (writes.length > 0)
      logger[writes.every((write) => write === 'status') ? 'debug' : 'info'](
        { key, writes, phase: state.status?.phase },
        'reconciled',
      );
    if (state.rejected !== undefined) {
      const previous = seen.vm.status?.conditions?.find((c) => c.type === 'SpecValid');
      const message = rejectionMessage(state.rejected);
      if (!previous?.message.includes(message))
        await recordEvent({ type: 'Warning', reason: 'RejectedByApiserver', message });
      throw new TerminalError(message);
    }
    if (outcome.requeueAfterMs !== undefined) return { requeueAfter: outcome.requeueAfterMs };
  }
}
