// What the VM needs, from what was observed (pure): its claims and disks, its runner pods, its
// migration, hot-plugged disks and the runner config. Each part is its concern's planner; the
// order here is the order they build on each other.
import { runnerImageErrors } from './runner-pod/allowed-image.js';
import { guestPortErrors } from './runner-pod/guest-ports.js';
import { hostNetworkErrors } from './runner-pod/host-network.js';
import { runnerImage, type RunnerImage } from './runner-pod/pod.js';
import { runsOutdatedRunner } from './runner-pod/update.js';
import type { V1Pod } from '@kubernetes/client-node';
import type { RunnerSnapshot } from '../../api/runner-snapshot.js';
import type { VirtualMachine } from '../../api/virtual-machine.js';
import { claimWait, claimWaitMessage, type ClaimWait } from './disks/claim-binding.js';
import { planDiskAttachments, withAttachments, type DiskAttachments } from './disks/attachments.js';
import { planDiskImports, type DiskImports } from './disks/imports.js';
import { planDiskSizes, type DiskSizes } from './disks/sizes.js';
import {
  displayPasswordErrors,
  generatedDisplaySecretName,
  wantsGeneratedDisplaySecret,
} from './runner-config/display-secret.js';
import { migratability, type Migratability } from './migration/migratable.js';
import { planMigration, type MigrationPlan } from './migration/plan.js';
import { readVmMigrationRequest } from './migration/request.js';
import type { Observed } from './observe.js';
import { provisioningSecretErrors } from './runner-config/provisioning-secrets.js';
import { runnerClaims, type RunnerClaim, type RunnerClaimOptions } from './disks/claims.js';
import {
  desiredRunnerConfig,
  maximumCpus,
  renderRunnerConfig,
  type RenderedRunnerConfig,
} from './runner-config/config.js';
import { planRunnerPods, type RunnerPodPlan } from './runner-pod/plan.js';
import { currentSnapshot } from './status/derive.js';
import { classErrors, withClass } from './class/vm-class.js';
import { planIpAddress, type IpAddressPlan } from './address/ip-address.js';

export interface Plan {
  /** The VM as its runner is made from it: with what its VirtualMachineClass gives it. */
  vm: VirtualMachine;
  claims: RunnerClaim[];
  /** Claim sizes and expansions; the disks' statuses with their imports and attachments. */
  diskSizes: DiskSizes;
  imports: DiskImports;
  podPlan: RunnerPodPlan;
  /** Claims to make now, before the runner pod that uses them. */
  claimsToMake: RunnerClaim[];
  /** Why no runner pod is made yet: imports, or claims not bound yet. */
  waiting?: { reason: string; message: string };
  /** The pod that runs the guest (a migration's target once it took over). */
  pod?: V1Pod;
  migration: { plan: MigrationPlan; migratable: Migratability };
  /** The snapshot of the runner of `pod`, as reported (not yet checked against the pod). */
  podSnapshot?: RunnerSnapshot;
  attachments: DiskAttachments;
  displaySecretName?: string;
  runnerConfig: RenderedRunnerConfig;
  /** What is wrong with the provisioning Secrets the spec names. */
  secretErrors: string[];
  /** Spec problems the CRD schema cannot express: reported in the SpecValid condition. */
  specErrors: string[];
  /** `pod` runs an older runner image than the default one the VM takes (runner-pod/update.ts). */
  outdatedRunner: boolean;
  /** The VM's own IP address (address/ip-address.ts). */
  ipAddress: IpAddressPlan;
}

/** Spec problems of the VM itself (the runner config and Secrets add theirs). */
function semanticErrors(vm: VirtualMachine): string[] {
  const { currentCpus } = vm.spec.vm;
  const maximum = maximumCpus(vm.spec.vm);
  return [
    ...(currentCpus !== undefined && currentCpus > maximum
      ? [`spec.vm.currentCpus: ${currentCpus} exceeds the ${maximum} CPUs of spec.vm.cpuTopology`]
      : []),
    ...guestPortErrors(vm),
  ];
}

export function planVm(
  seen: Observed,
  options: RunnerClaimOptions & {
    defaultRunnerImage: RunnerImage;
    allowedRunnerImages?: readonly string[];
    allowDisplayWithoutPassword?: boolean;
    kvm?: boolean;
    hostNetworkNamespaces?: readonly string[];
    ipAddresses?: boolean;
  },
): Plan {
  const vm = withClass(seen.vm, seen.vmClass.class);
  const ipAddress = planIpAddress(seen.vm, seen.ipAddress, options.ipAddresses ?? false);
  const claims = runnerClaims(vm, seen.claims, options);
  const diskSizes = planDiskSizes(claims, seen.claims, seen.storageClasses.byName);
  const imports = planDiskImports({
    vm,
    images: seen.images,
    claims,
    existing: seen.claims,
    importerPods: seen.pods.importer,
    progress: seen.importProgress,
    claimWait: (made) => claimWait(made, true, seen.storageClasses),
  });
  diskSizes.statuses = diskSizes.statuses.map((disk) => {
    const imported = imports.statuses.get(disk.name);
    return imported ? { name: disk.name, claim: disk.claim, ...imported } : disk;
  });
  const pods = planPods(seen, claims, imports, ipAddress.waiting);
  const migration = planVmMigration(seen, pods.podPlan.current, runnerImage(vm, options.defaultRunnerImage));
  const pod = migration.plan.switchTo ?? pods.podPlan.current;
  const podSnapshot = migration.plan.switchTo ? migration.targetSnapshot : seen.snapshot;
  const attachments = planDiskAttachments({
    claims,
    existing: seen.claims,
    pod,
    attachPods: seen.pods.attach,
    snapshot: currentSnapshot(podSnapshot, pod, vm.status),
    hasKeySecret: seen.owned.hasMigrationKeys,
  });
  diskSizes.statuses = withAttachments(diskSizes.statuses, attachments, seen.claims);
  // A generated display Secret is made before anything reads this (runner-config/display-secret-step.ts).
  const displaySecretName =
    seen.displaySecret?.metadata?.name ??
    (wantsGeneratedDisplaySecret(vm) ? generatedDisplaySecretName(vm.metadata.name) : undefined);
  const runnerConfig = renderRunnerConfig(
    desiredRunnerConfig(vm, {
      hasDisplaySecret: displaySecretName !== undefined,
      diskSizes: diskSizes.capacities,
      podDisks: attachments.podVolumes,
      hotplugDisks: attachments.config,
      // Asked of the pod the snapshot was cut on only (not a migration's target).
      ...(seen.snapshotCopy?.copy &&
        seen.snapshotCopy.podUid === pod?.metadata?.uid && { snapshotCopy: seen.snapshotCopy.copy }),
      kvm: options.kvm ?? true,
      ipAddress: ipAddress.address,
    }),
  );
  const secretErrors = provisioningSecretErrors(vm, seen.provisioningSecrets);
  return {
    vm,
    claims,
    diskSizes,
    imports,
    ...pods,
    pod,
    migration: { plan: migration.plan, migratable: migration.migratable },
    podSnapshot,
    attachments,
    displaySecretName,
    runnerConfig,
    secretErrors,
    specErrors: [
      ...semanticErrors(vm),
      ...(seen.vmClass.error ? [seen.vmClass.error] : []),
      ...(seen.vmClass.class ? classErrors(seen.vm, seen.vmClass.class) : []),
      ...runnerImageErrors(vm, options.defaultRunnerImage, options.allowedRunnerImages ?? []),
      ...hostNetworkErrors(vm, options.hostNetworkNamespaces ?? []),
      ...displayPasswordErrors(
        vm,
        seen.displaySecret !== undefined,
        options.allowDisplayWithoutPassword ?? false,
      ),
      ...runnerConfig.errors,
      ...secretErrors,
    ],
    outdatedRunner: runsOutdatedRunner(vm, pod, options.defaultRunnerImage.image),
    ipAddress,
  };
}

/**
 * The VM's runner pods. A runner pod waits for its claims, made first and then bound
 * (disks/claim-binding.ts), for its disks' imports (it never boots a half-written disk), and for
 * its IP address (`addressWait`).
 */
function planPods(seen: Observed, claims: RunnerClaim[], imports: DiskImports, addressWait: Plan['waiting']) {
  let podPlan = planRunnerPods({
    vm: seen.vm,
    pods: seen.pods.runner,
    node: seen.node,
    absent: seen.absentPods,
  });
  const wanted = podPlan.create !== undefined;
  const claimsToMake = wanted
    ? claims.filter((claim) => !claim.exists && !imports.createClaims.includes(claim))
    : [];
  const claimWaits: ClaimWait[] = wanted
    ? claims.flatMap((claim) => {
        const made = seen.claims.find((c) => c.metadata?.name === claim.claimName);
        return (
          (made
            ? claimWait(made, true, seen.storageClasses)
            : claimWait(claim.desired, false, seen.storageClasses)) ?? []
        );
      })
    : [];
  const copies = seen.volumeCopies;
  const waiting =
    (copies.length > 0
      ? {
          reason: 'WaitingForVolumeCopies',
          message: `the VM starts once ${copies.join(' and ')} no longer copies its volumes`,
        }
      : undefined) ??
    imports.waiting ??
    (claimWaits.length > 0
      ? { reason: 'WaitingForVolumeBinding', message: claimWaitMessage('the runner pod', claimWaits) }
      : undefined) ??
    (wanted ? addressWait : undefined);
  if (waiting) podPlan = { ...podPlan, create: undefined };
  return { podPlan, claimsToMake, ...(waiting && { waiting }) };
}

/** Where the VM's live migration stands and what to do next (migration/plan.ts). */
function planVmMigration(seen: Observed, current: V1Pod | undefined, image: RunnerImage) {
  const { vm } = seen;
  const state = vm.status?.migrationState;
  const target = state?.targetPod
    ? seen.pods.runner.find((pod) => pod.metadata?.name === state.targetPod)
    : undefined;
  const targetSnapshot = target ? currentSnapshot(seen.targetSnapshot, target, undefined) : undefined;
  const migratable = migratability(vm, current, seen.claims);
  const plan = planMigration({
    vm,
    request: readVmMigrationRequest(vm.metadata.annotations),
    pods: seen.pods.runner,
    claims: seen.claims,
    current,
    sourceSnapshot: currentSnapshot(seen.snapshot, current, vm.status),
    targetSnapshot,
    migratable,
    node: seen.node,
    slot: seen.migrationSlot,
    ...(seen.snapshotCopy && { copying: `snapshot ${seen.snapshotCopy.snapshot}` }),
    image,
    now: seen.now,
  });
  return { plan, migratable, targetSnapshot };
}
