// The state one VM reconcile's steps share: what was observed and planned, and what the steps
// decided on the way (each field says which step sets it); and the I/O they write through.
import type { ImportDestinations } from './disks/importer-pod.js';
import type { KubernetesObject, V1Pod, V1Secret } from '@kubernetes/client-node';
import type { ImportProgress } from '../../api/import-progress.js';
import type { RunnerSnapshot } from '../../api/runner-snapshot.js';
import type { EvictionStrategy, VirtualMachineStatus } from '../../api/virtual-machine.js';
import type { VirtualMachineOperation } from '../../api/virtual-machine-operation.js';
import type { KubeClients } from '../../kube/clients.js';
import type { ObjectCache } from '../../kube/object-cache.js';
import type { HeldAssignment } from '../../pools/assignment.js';
import type { TenantCredentials } from '../../api/tenant-redis.js';
import type { Logger } from '../../util/logger.js';
import type { MigrationRequest } from '../../runner/migration/request.js';
import type { MigrationSlots } from '../../operator/migration-slots.js';
import type { RunnerUpdateMethod } from './runner-pod/update.js';
import type { Observed } from './observe.js';
import type { PipelineState } from './pipeline.js';
import type { Plan } from './plan.js';
import type { PolicyStop } from './lifecycle/run-policy.js';
import type { RunnerPodPlan } from './runner-pod/plan.js';
import type { LoadBalancerState, ObservedState } from './status/derive.js';
import type { LoadBalancerDefaults } from './load-balancer/service.js';
import type { RunnerNetworkPolicySettings } from './network-policy/policy.js';
import type { ObjectEvent } from '../events.js';
import type { Overcommit, RunnerImage } from './runner-pod/pod.js';

export interface VmReconcilerOptions {
  clients: KubeClients;
  /** The watches' caches: every read but of a VM's provisioning Secrets comes from here. */
  cache: ObjectCache;
  /** The newest generation of the VM any replica has seen (generation-marks.ts); 0 when unknown. */
  newestGeneration?: (key: string, uid: string) => Promise<number>;
  defaultRunnerImage: RunnerImage;
  /** Where importer pods may not fetch from, now (the cluster's own endpoints change with its nodes). */
  importDestinations?: () => ImportDestinations;
  /** Whether a SPICE display may run without a password (an admin's choice; default: refused). */
  allowDisplayWithoutPassword?: boolean;
  /** Runner images a VM may name in spec.image besides the default (exact, or a prefix ending in `*`). */
  allowedRunnerImages?: readonly string[];
  /** Whether runner pods ask for /dev/kvm (vmop's node agent); QEMU emulates without (default: true). */
  kvm?: boolean;
  /** Namespaces whose VMs may have host-bridge tap networks (a privileged runner on the host network). */
  hostNetworkNamespaces?: readonly string[];
  /** VM subnets are configured: every VM gets an address of its own (a VirtualMachineIPAddress). */
  ipAddresses?: boolean;
  /** The Redis URLs of each namespace's runners and importers (made on demand), for its runner Secret. */
  redisCredentials: TenantCredentials;
  overcommit?: Overcommit;
  /** The StorageClass of new runner data claims; the default one when undefined. */
  runnerDataStorageClass?: string;
  /** What an eviction does to a VM without spec.evictionStrategy (default LiveMigrateIfPossible). */
  evictionStrategy?: EvictionStrategy;
  /** The access mode of new runner data claims (ReadWriteMany lets VMs migrate). */
  runnerDataAccessMode?: 'ReadWriteOnce' | 'ReadWriteMany';
  /** The manager's LoadBalancer Service setting (default: none unless a VM asks for one). */
  loadBalancer?: LoadBalancerDefaults;
  /** The NetworkPolicy of runner pods (network-policy/policy.ts); none made when absent. */
  runnerNetworkPolicy?: RunnerNetworkPolicySettings;
  /** Nudge kubelet to refresh a changed config volume at once (default); off only to measure kubelet's own sync. */
  configNudge?: boolean;
  /** The runner's latest snapshot of a VM key (from Redis; a migration target's: `suffix`), if any. */
  readSnapshot?: (key: string, suffix?: string) => Promise<RunnerSnapshot | undefined>;
  /** What an upgrade does to a VM left on an older runner image (default LiveMigrate). */
  runnerUpdate?: RunnerUpdateMethod;
  /** The migration limits' slots (shared by the replicas); no limits when absent. */
  migrationSlots?: MigrationSlots;
  /** Sends a request to a runner pod's runner at once (through Redis: api/runner-request.ts). */
  sendRunnerRequest?: SendRunnerRequest;
  /** The latest progress of a disk's import (from Redis), if any. */
  readImportProgress?: (key: string, volume: string) => Promise<ImportProgress | undefined>;
  /** Told of each Event a reconcile records, with the status it wrote (the managers' metrics). */
  onTransition?: (event: ObjectEvent, status: VirtualMachineStatus | undefined) => void;
  logger: Logger;
  now?: () => Date;
}

export type SendRunnerRequest = (
  namespace: string,
  podUid: string,
  request: MigrationRequest,
) => Promise<void>;

/** Writes through the manager's clients, with what a replica keeps between reconciles. */
export interface VmIo {
  clients: KubeClients;
  options: VmReconcilerOptions;
  logger: Logger;
  now: () => Date;
  /** Server-side applies `object` unless `current` has it already; the applied object, if written. */
  apply<T extends KubernetesObject>(object: T, current: T | undefined): Promise<T | undefined>;
  /** apply() for an object all the namespace's VMs need: written once when many reconciles want it. */
  applyShared<T extends KubernetesObject>(object: T, current: T | undefined): Promise<unknown>;
  /** Creates an operation; false when it exists already. */
  createOperation(operation: VirtualMachineOperation): Promise<boolean>;
  /** The VM as this replica wrote it, until its watch brings it (the next reconcile starts from it). */
  rememberOwnWrite(vm: KubernetesObject): void;
  /** Waits (briefly) until the cache has a newer VM than `vm`: after a status write it refused. */
  waitForNewerVm(vm: { metadata?: { resourceVersion?: string } }): Promise<void>;
  cache: ObjectCache;
}

export interface VmState extends PipelineState {
  readonly seen: Observed;
  readonly plan: Plan;
  readonly io: VmIo;
  /** The display Secret: the observed one, or the one the display Secret step made. */
  displaySecret?: V1Secret;
  /** The runner pods to have; the legacy StatefulSet step holds a new pod back. */
  podPlan: RunnerPodPlan;
  /** The pod that runs the guest (plan.pod). */
  pod?: V1Pod;
  /** Set by the load balancer step: whether the VM's Service is in place, when it wants one. */
  loadBalancer?: LoadBalancerState;
  /** Set by the status step: the facts it folded, and the status it wrote. */
  observedForStatus?: ObservedState;
  status?: VirtualMachineStatus;
  /** The VM's resourceVersion after the last status write (guards the writes after it). */
  resourceVersion?: string;
  /** The status as last written (or read). */
  statusBefore?: VirtualMachineStatus;
  /** Set by the status step: the pool assignment the status keeps, and a release. */
  held?: HeldAssignment;
  /** Set by the status step: the run policy stops the VM (lifecycle/run-policy.ts). */
  policyStop?: PolicyStop;
  /** Set by the status step: a runner pod is to be made now (the status names it). */
  creating?: boolean;
}
