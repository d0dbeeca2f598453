// A VM reconcile's state built without an apiserver, for the steps' unit tests: observed facts
// (a VM and whatever a test adds), the plan made from them as the reconciler makes it, and I/O
// that records each write and answers with what the test says. A stand-in for the apiserver,
// named so: what a step does against a real one is the integration and e2e tiers' business.
import type { KubernetesObject, V1Pod } from '@kubernetes/client-node';
import { VirtualMachine } from '../../../../src/api/virtual-machine.js';
import type { KubeClients } from '../../../../src/kube/clients.js';
import type { ObjectCache } from '../../../../src/kube/object-cache.js';
import { nodeFacts } from '../../../../src/reconcilers/virtual-machine/node-facts.js';
import type { Observed } from '../../../../src/reconcilers/virtual-machine/observe.js';
import { planVm } from '../../../../src/reconcilers/virtual-machine/plan.js';
import { routedNicOfVm } from '../../../../src/reconcilers/virtual-machine/address/routed-nic.js';
import { runnerClaims } from '../../../../src/reconcilers/virtual-machine/disks/claims.js';
import { desiredRunnerPod } from '../../../../src/reconcilers/virtual-machine/runner-pod/pod.js';
import type { VmReconcilerOptions, VmState } from '../../../../src/reconcilers/virtual-machine/vm-state.js';
import { pino } from 'pino';
import { sharedCredentials } from '../../../../src/operator/tenant-credentials.js';

export const NOW = new Date('2026-11-27T12:00:00Z');

export interface Call {
  /** e.g. `core.createNamespacedPod`, `apply`, `createOperation`. */
  call: string;
  args: unknown;
}

/** A VM as the CRD admits it: `vm` is merged into spec.vm, `rest` into the object. */
export function testVm(vm: Record<string, unknown> = {}, rest: Record<string, unknown> = {}): VirtualMachine {
  return VirtualMachine.parse({
    apiVersion: 'vmoperator.jdrupes.org/v1',
    kind: 'VirtualMachine',
    metadata: { name: 'vm', namespace: 'ns', uid: 'vm-uid', generation: 1, resourceVersion: '10' },
    spec: { vm: { state: 'Running', maximumRam: '256Mi', ...vm } },
    ...rest,
  });
}

/** A runner pod of `vm` that runs on node-1. */
export function runningPod(name = 'vm', extra: Partial<V1Pod> = {}): V1Pod {
  return {
    metadata: {
      name,
      namespace: 'ns',
      uid: `${name}-uid`,
      labels: { 'app.kubernetes.io/name': 'vm-runner', 'app.kubernetes.io/instance': 'vm' },
      ownerReferences: [
        { apiVersion: 'v1', kind: 'VirtualMachine', name: 'vm', uid: 'vm-uid', controller: true },
      ],
    },
    spec: { nodeName: 'node-1', containers: [] },
    status: { phase: 'Running' },
    ...extra,
  };
}

export interface FixtureOptions {
  vm?: VirtualMachine;
  seen?: Partial<Observed>;
  options?: Partial<VmReconcilerOptions>;
  /** Answers by call (`core.createNamespacedSecret`…): a value, or a function of the arguments that may throw. */
  answers?: Record<string, unknown>;
}

const readyNode = { status: { conditions: [{ type: 'Ready', status: 'True' }] } };

export function vmState(fixture: FixtureOptions = {}): { state: VmState; calls: Call[] } {
  const calls: Call[] = [];
  const answer = (call: string, args: unknown) => {
    calls.push({ call, args });
    const given = fixture.answers?.[call];
    if (typeof given === 'function') return (given as (a: unknown) => unknown)(args);
    if (given !== undefined) return given;
    // A write answers with what it wrote, at a new resourceVersion (apply() is given the object itself).
    const written = args as { body?: KubernetesObject; metadata?: object } | undefined;
    const body = written?.body ?? (written?.metadata ? (written as KubernetesObject) : undefined);
    return body ? { ...body, metadata: { ...body.metadata, resourceVersion: '11' } } : {};
  };
  const group = (name: string) =>
    new Proxy({}, { get: (_, method) => async (args: unknown) => answer(`${name}.${String(method)}`, args) });
  const clients = {
    core: group('core'),
    apps: group('apps'),
    customObjects: group('customObjects'),
    objects: group('objects'),
  } as unknown as KubeClients;
  const vm = fixture.vm ?? testVm();
  const seen: Observed = {
    key: `vm:ns/${vm.metadata.name}`,
    namespace: 'ns',
    name: vm.metadata.name,
    vm,
    provisioningSecrets: {},
    claims: [],
    pods: { runner: [], importer: [], attach: [] },
    images: () => undefined,
    volumeCopies: [],
    importProgress: new Map(),
    storageClasses: { byName: () => undefined, byDefault: () => undefined },
    node: (name) => nodeFacts(name, readyNode),
    nodes: [nodeFacts('node-1', readyNode)],
    owned: { hasMigrationKeys: false },
    networkPolicies: [],
    operation: () => undefined,
    vmClass: {},
    now: NOW,
    ...fixture.seen,
  };
  const options = {
    clients,
    cache: {} as ObjectCache,
    defaultRunnerImage: { image: 'runner:1' },
    redisCredentials: sharedCredentials('redis://runner@redis:6379'),
    logger: pino({ level: 'silent' }),
    ...fixture.options,
  } as VmReconcilerOptions;
  const plan = planVm(seen, options);
  const state: VmState = {
    seen,
    plan,
    specErrors: plan.specErrors,
    podPlan: plan.podPlan,
    pod: plan.pod,
    io: {
      clients,
      cache: options.cache,
      options,
      logger: options.logger,
      now: () => NOW,
      apply: async (object) => answer('apply', object) as never,
      applyShared: async (object) => answer('applyShared', object),
      createOperation: async (operation) => answer('createOperation', operation) !== false,
      rememberOwnWrite: () => undefined,
      waitForNewerVm: async () => undefined,
    },
  };
  return { state, calls };
}

/** The calls' names, in order. */
export const callNames = (calls: Call[]) => calls.map((c) => c.call);

/** A StorageClass that binds its claims at once (they are made before the pod that uses them). */
export const immediateClass = {
  metadata: { name: 'fast' },
  provisioner: 'x',
  volumeBindingMode: 'Immediate',
};

/** A disk of 1Gi on class `fast`, filled from `source` when given. */
export const fastDisk = (source?: object) => ({
  volumeClaimTemplate: {
    metadata: { name: 'system' },
    spec: { storageClassName: 'fast', resources: { requests: { storage: '1Gi' } } },
  },
  ...(source && { source }),
});

/** The VM's runner pod as the manager makes it, with its own address when one is given. */
export const testRunnerPod = (vm: VirtualMachine, address?: string) =>
  desiredRunnerPod(vm, {
    name: 'vm',
    claims: runnerClaims(vm, []),
    defaultRunnerImage: { image: 'runner:1' },
    routedNic: routedNicOfVm(vm, address),
  });
