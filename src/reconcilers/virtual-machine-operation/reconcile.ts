// The idempotent reconcile of one VirtualMachineOperation key: check, signal the VM once, then
// read the outcome from the VM's status; finished operations are cleaned up.
import { type KubernetesObject, type V1Node, type V1Pod } from '@kubernetes/client-node';
import type { ObjectCache } from '../../kube/object-cache.js';
import {
  KEEP_FINISHED,
  OPERATION_VM_LABEL,
  completion,
  evictsLive,
  refusal,
  type OperationContext,
  signalFor,
  supersedes,
  type Outcome,
} from './operations.js';
import {
  OPERATION_KIND,
  VirtualMachineOperation,
  operationApiRef,
  isFinished,
  parseOperationKey,
  type OperationPhase,
  type OperationStatus,
} from '../../api/virtual-machine-operation.js';
import { KIND, VirtualMachine, type Condition, type EvictionStrategy } from '../../api/virtual-machine.js';
import { nodeFacts } from '../virtual-machine/node-facts.js';
import { MIGRATE_ANNOTATION, migrationIdOf } from '../virtual-machine/migration/request.js';
import {
  deletePodByUid,
  isConflict,
  isNotFound,
  readOptional,
  type KubeClients,
} from '../../kube/clients.js';
import type { HandlerResult } from '../../queue/index.js';
import type { Logger } from '../../util/logger.js';
import { eventRecorder } from '../events.js';
import { kubeTime } from '../../kube/time.js';
import {
  OPERATION_ANNOTATION,
  RESET_REQUEST_ANNOTATION,
  START_REQUEST_ANNOTATION,
  ownerReference,
  vmApiRef,
} from '../virtual-machine/naming.js';
import { mergePatch } from '../../kube/merge-patch.js';

export interface OperationReconcilerOptions {
  clients: KubeClients;
  /** The watches' caches (see watch-edge.ts). */
  cache: ObjectCache;
  /** What an eviction does to a VM without spec.evictionStrategy. */
  evictionStrategy?: EvictionStrategy;
  logger: Logger;
  now?: () => Date;
}

const startsAfresh = (op: VirtualMachineOperation) => op.spec.type === 'Start' || op.spec.type === 'Restart';

export function createOperationReconciler(options: OperationReconcilerOptions) {
  const { clients, cache, logger } = options;
  const now = options.now ?? (() => new Date());
  const record = eventRecorder(clients, logger, now);
  const context = (): OperationContext => ({
    nodes: cache.list<V1Node>('Node', undefined).map((node) => nodeFacts(node.metadata!.name!, node)),
    evictionStrategy: options.evictionStrategy ?? 'LiveMigrateIfPossible',
  });

  /** The cached operation (a copy); not cached: gone, or its watch event is still to come. */
  function readOperation(namespace: string, name: string) {
    const raw = cache.get(OPERATION_KIND, namespace, name);
    return raw && VirtualMachineOperation.parse(raw);
  }

  /**
   * The VM: cached, or read when the cache has none, so that an operation made with its VM in one
   * apply is not failed with VirtualMachineNotFound before the VM's watch event came.
   */
  async function readVm(namespace: string, name: string): Promise<KubernetesObject | undefined> {
    return (
      cache.get(KIND, namespace, name) ??
      (await readOptional(() => clients.customObjects.getNamespacedCustomObject(vmApiRef(namespace, name))))
    );
  }

  async function writeStatus(op: VirtualMachineOperation, status: OperationStatus): Promise<void> {
    await clients.customObjects.patchNamespacedCustomObjectStatus(
      { ...operationApiRef(op.metadata.namespace!, op.metadata.name), body: { status } },
      mergePatch,
    );
  }

  function conditions(completed: Condition['status'], outcome: Outcome, signalSent: Condition['status']) {
    const time = kubeTime(now());
    return [
      { type: 'Completed', status: completed, lastTransitionTime: time, ...outcome },
      {
        type: 'SignalSent',
        status: signalSent,
        lastTransitionTime: time,
        reason: signalSent === 'True' ? 'SignalSentSuccess' : 'SignalNotSent',
        message: signalSent === 'True' ? 'the VM was told' : 'the VM was not told',
      },
    ];
  }

  async function vmEvent(vm: VirtualMachine, type: 'Normal' | 'Warning', reason: string, message: string) {
    const { apiVersion, kind, metadata } = vm;
    await record(
      { apiVersion, kind, name: metadata.name, namespace: metadata.namespace!, uid: metadata.uid! },
      { type, reason, message },
    );
  }

  /** Ends an operation (and lets go of the VM, if it held it); the VM's other old ones are cleaned up. */
  async function finish(
    op: VirtualMachineOperation,
    vm: VirtualMachine | undefined,
    phase: Extract<OperationPhase, 'Completed' | 'Failed' | 'Superseded'>,
    outcome: Outcome,
  ): Promise<HandlerResult> {
    await writeStatus(op, {
      phase,
      ...outcome,
      conditions: conditions(
        phase === 'Failed' ? 'False' : 'True',
        outcome,
        op.status?.signalledAt ? 'True' : 'False',
      ),
      completedAt: now().toISOString(),
    });
    logger.info(
      { operation: `${op.metadata.namespace}/${op.metadata.name}`, phase, ...outcome },
      'operation finished',
    );
    if (!vm) return { requeueAfter: KEEP_FINISHED.ms };
    if (vm.metadata.annotations?.[OPERATION_ANNOTATION] === op.metadata.name) {
      await clients.customObjects.patchNamespacedCustomObject(
        {
          ...vmApiRef(vm.metadata.namespace!, vm.metadata.name),
          body: { metadata: { annotations: { [OPERATION_ANNOTATION]: null, [MIGRATE_ANNOTATION]: null } } },
        },
        mergePatch,
      );
    }
    const what = `${op.spec.type} (VirtualMachineOperation ${op.metadata.name})`;
    if (phase === 'Failed') await vmEvent(vm, 'Warning', 'OperationFailed', `${what}: ${outcome.message}`);
    else if (phase === 'Completed')
      await vmEvent(vm, 'Normal', 'OperationCompleted', `${what}: ${outcome.message}`);
    await removeOldOperations(vm);
    return { requeueAfter: KEEP_FINISHED.ms };
  }

  /** Keeps the newest KEEP_FINISHED.count finished operations of the VM. */
  async function removeOldOperations(vm: VirtualMachine): Promise<void> {
    const namespace = vm.metadata.namespace!;
    const finished = cache
      .list(OPERATION_KIND, namespace, { [OPERATION_VM_LABEL]: vm.metadata.name })
      .map((item) => VirtualMachineOperation.safeParse(item))
      .flatMap((parsed) => (parsed.success && isFinished(parsed.data) ? [parsed.data] : []))
      .sort((a, b) => (b.status?.completedAt ?? '').localeCompare(a.status?.completedAt ?? ''));
    for (const old of finished.slice(KEEP_FINISHED.count))
      await deleteOperation(namespace, old.metadata.name);
  }

  async function deleteOperation(namespace: string, name: string): Promise<void> {
    logger.info({ operation: `${namespace}/${name}` }, 'removing a finished operation');
    await clients.customObjects
      .deleteNamespacedCustomObject(operationApiRef(namespace, name))
      .catch((err: unknown) => {
        if (!isNotFound(err)) throw err;
      });
  }

  /** The VM owns its operations (deleting it deletes them) and labels them for listing. */
  async function adopt(op: VirtualMachineOperation, vm: VirtualMachine): Promise<void> {
    const owned = op.metadata.ownerReferences?.some((ref) => ref.uid === vm.metadata.uid);
    if (owned && op.metadata.labels?.[OPERATION_VM_LABEL] === vm.metadata.name) return;
    await clients.customObjects.patchNamespacedCustomObject(
      {
        ...operationApiRef(op.metadata.namespace!, op.metadata.name),
        body: {
          metadata: {
            labels: { [OPERATION_VM_LABEL]: vm.metadata.name },
            ownerReferences: [{ ...ownerReference(vm), controller: false }],
          },
        },
      },
      mergePatch,
    );
  }

  /** Deletes or evicts the runner pod the operation was signalled for (idempotent: by uid). */
  async function deliverToPod(op: VirtualMachineOperation, vm: VirtualMachine): Promise<void> {
    const signal = signalFor(op, vm);
    const uid = op.status?.podUid;
    if (!uid || (!signal.deletePod && !signal.evictPod)) return;
    const namespace = vm.metadata.namespace!;
    const name = op.status?.podName ?? vm.status?.runnerPod?.name;
    if (!name) return;
    if (!signal.evictPod) {
      // Each of the VM's status changes brings the operation back: delete once, not each time
      // (again only to shorten the grace period, as --force does).
      const pod = cache.get<V1Pod>('Pod', namespace, name);
      const grace = signal.deletePod?.gracePeriodSeconds;
      if (
        pod?.metadata?.uid === uid &&
        pod.metadata.deletionTimestamp &&
        (grace === undefined || (pod.metadata.deletionGracePeriodSeconds ?? 0) <= grace)
      )
        return;
      // Gone already, or a newer pod is there: done either way.
      await deletePodByUid(clients.core, { name, namespace, uid }, signal.deletePod);
      return;
    }
    try {
      await clients.core.createNamespacedPodEviction({
        name,
        namespace,
        body: { metadata: { name, namespace }, deleteOptions: { preconditions: { uid } } },
      });
    } catch (err) {
      // Gone already, or a newer pod is there (the uid precondition failed): done either way.
      if (!isNotFound(err) && !isConflict(err)) throw err;
    }
  }

  /** Tells the VM: its state, the in-flight annotation and a reset request, in one guarded write. */
  async function signal(operation: VirtualMachineOperation, vm: VirtualMachine): Promise<void> {
    // An Evict moves the VM live when it can; which it does is decided now, and recorded.
    const evict = operation.spec.type === 'Evict' ? evictsLive(operation, vm, context()) : undefined;
    const op = evict ? { ...operation, status: { ...operation.status, live: evict.live } } : operation;
    const { state, reset, migrate } = signalFor(op, vm);
    const migrationId = migrate ? migrationIdOf(op.metadata.uid!) : undefined;
    const podName = vm.status?.runnerPod?.name;
    const pod = podName ? cache.get<V1Pod>('Pod', vm.metadata.namespace!, podName) : undefined;
    await clients.customObjects.patchNamespacedCustomObject(
      {
        ...vmApiRef(vm.metadata.namespace!, vm.metadata.name),
        body: {
          metadata: {
            // Another operation's claim made meanwhile makes this write fail (409), and the retry see it.
            resourceVersion: vm.metadata.resourceVersion,
            annotations: {
              [OPERATION_ANNOTATION]: op.metadata.name,
              ...(reset && { [RESET_REQUEST_ANNOTATION]: op.metadata.name }),
              ...(migrationId && {
                [MIGRATE_ANNOTATION]: JSON.stringify({
                  id: migrationId,
                  operation: op.metadata.name,
                  ...(op.spec.migrate?.nodeName && { nodeName: op.spec.migrate.nodeName }),
                }),
              }),
              // KubeVirt's way: a start or restart request resets the start back-off.
              ...(startsAfresh(op) && { [START_REQUEST_ANNOTATION]: op.metadata.name }),
            },
          },
          ...(state && { spec: { vm: { state } } }),
        },
      },
      mergePatch,
    );
    const signalledAt = now().toISOString();
    const inProgress = {
      reason: `${op.spec.type}InProgress`,
      message: evict
        ? evict.live
          ? 'the VM moves live to another node'
          : `the VM is stopped and started elsewhere: it does not move live, as ${evict.why}`
        : `the VM was told to ${op.spec.type.toLowerCase()}`,
    };
    const status: OperationStatus = {
      phase: 'InProgress',
      ...inProgress,
      signalledAt,
      ...(evict && { live: evict.live, liveReason: evict.why }),
      ...(migrationId && { live: true, migrationId }),
      ...(pod?.metadata?.uid && { podName: pod.metadata.name, podUid: pod.metadata.uid }),
      ...(pod?.spec?.nodeName && { node: pod.spec.nodeName }),
      conditions: conditions('False', inProgress, 'True'),
    };
    await writeStatus(op, status);
    const signalled = { ...op, status };
    await deliverToPod(signalled, vm);
    await vmEvent(
      vm,
      'Normal',
      `${op.spec.type}Requested`,
      `${op.spec.type}${op.spec.force ? ' (force)' : ''} requested by VirtualMachineOperation ${op.metadata.name}`,
    );
  }

  return async function reconcileOperation(key: string): Promise<HandlerResult> {
    const { namespace, name } = parseOperationKey(key);
    const op = readOperation(namespace, name);
    if (!op || op.metadata.deletionTimestamp) return;
    if (isFinished(op)) {
      const age = now().getTime() - new Date(op.status?.completedAt ?? 0).getTime();
      if (age < KEEP_FINISHED.ms) return { requeueAfter: KEEP_FINISHED.ms - age };
      await deleteOperation(namespace, name);
      return;
    }
    const vmRaw = await readVm(namespace, op.spec.virtualMachineName);
    if (!vmRaw) {
      return finish(op, undefined, 'Failed', {
        reason: 'VirtualMachineNotFound',
        message: `VirtualMachine ${namespace}/${op.spec.virtualMachineName} does not exist`,
      });
    }
    const vm = VirtualMachine.parse(vmRaw);
    await adopt(op, vm);

    const holder = vm.metadata.annotations?.[OPERATION_ANNOTATION];
    if (holder === name && op.status?.signalledAt) {
      await deliverToPod(op, vm);
      const outcome = completion(op, vm);
      if (!outcome) return; // the VM's next status change brings this key back (watch edge)
      return finish(op, vm, outcome.reason === 'OperationCompleted' ? 'Completed' : 'Failed', outcome);
    }
    if (holder && holder !== name) {
      const active = readOperation(namespace, holder);
      if (active && !isFinished(active)) {
        if (!supersedes(active, op)) {
          return finish(op, vm, 'Failed', {
            reason: 'NotReadyToBeExecuted',
            message: `operation ${holder} (${active.spec.type}) is still in progress; this one was not carried out`,
          });
        }
        await finish(active, undefined, 'Superseded', {
          reason: 'Superseded',
          message: `superseded by ${name} (${op.spec.type}${op.spec.force ? ', force' : ''})`,
        });
      }
    }
    if (holder !== name) {
      const refused = refusal(op, vm, context());
      if (refused) return finish(op, vm, 'Failed', refused);
    }
    await signal(op, vm);
  };
}
