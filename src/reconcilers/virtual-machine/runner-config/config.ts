// Derives the runner's config.yaml (the "/Runner" document) from a VirtualMachine.
import { stringify } from 'yaml';
import type { z } from 'zod';
import {
  type DriveConfig,
  RunnerConfigFile,
  configDigest,
  formatFieldPath,
  type HotplugDiskConfig,
  type RunnerConfigInput,
} from '../../../api/runner-config.js';
import type { SnapshotCopyConfig } from '../../../api/snapshot-copy.js';
import type { VirtualMachine, VmDefinition } from '../../../api/virtual-machine.js';
import {
  CLOUD_INIT_SECRET_DIR,
  DATA_DIR,
  DISPLAY_SECRET_DIR,
  RESET_REQUEST_ANNOTATION,
  SYSPREP_SECRET_DIR,
  diskVolumeName,
} from '../naming.js';
import { afterQemuEnds } from '../lifecycle/run-policy.js';
import { routedNetworkIndex, routedNicOfVm } from '../address/routed-nic.js';

type RunnerDrive = z.input<typeof DriveConfig>;

/** VM-Operator's default when neither maximumCpus nor cpuTopology is given. */
const DEFAULT_MAXIMUM_CPUS = 4;

export interface RunnerConfigOptions {
  /** Whether a display-password Secret exists and is mounted at DISPLAY_SECRET_DIR. */
  hasDisplaySecret: boolean;
  /** What each disk's claim holds now, by volume (disks/sizes.ts): the runner grows a disk to it. */
  diskSizes?: Record<string, string>;
  /** The disks the runner pod has, while there is one: a disk the spec gained since is attached (disks/attachments.ts). */
  podDisks?: Set<string>;
  /** Disks to attach to the running VM. */
  hotplugDisks?: HotplugDiskConfig[];
  /** A snapshot's copy of the running VM's disks. */
  snapshotCopy?: SnapshotCopyConfig;
  /** Whether the runner pod gets /dev/kvm; QEMU emulates (TCG) without it. */
  kvm?: boolean;
  /** The VM's own address, once attached to it: its first `user` network carries it (routed). */
  ipAddress?: string;
}

export function maximumCpus(vm: VmDefinition): number {
  if (vm.maximumCpus !== undefined) return vm.maximumCpus;
  if (!vm.cpuTopology) return DEFAULT_MAXIMUM_CPUS;
  const { sockets, diesPerSocket, coresPerDie, threadsPerCore } = vm.cpuTopology;
  return [sockets, diesPerSocket, coresPerDie, threadsPerCore].reduce((product, n) => product * (n || 1), 1);
}

/**
 * cloud-init meta-data with local-hostname filled in when missing. Deviation from VM-Operator:
 * no instance-id from the VM's resourceVersion (every status write changes it, and so it would make
 * cloud-init run again and every spec change wait for a restart); the runner derives it from the
 * cloud-init data, so it changes exactly when the data does.
 */
export function cloudInitMetaData(vm: VirtualMachine): Record<string, string> {
  return { 'local-hostname': vm.metadata.name, ...vm.spec.cloudInit?.metaData };
}

export function desiredRunnerConfig(vm: VirtualMachine, options: RunnerConfigOptions): RunnerConfigInput {
  const { spec } = vm;
  const def = spec.vm;
  const cloudInit = spec.cloudInit && {
    metaData: cloudInitMetaData(vm),
    ...(spec.cloudInit.userData && { userData: spec.cloudInit.userData }),
    ...(spec.cloudInit.networkConfig && { networkConfig: spec.cloudInit.networkConfig }),
    ...(spec.cloudInit.secretRef && { secretDir: CLOUD_INIT_SECRET_DIR }),
  };
  const maximum = maximumCpus(def);
  const routed = routedNicOfVm(vm, options.ipAddress);
  const resetRequest = vm.metadata.annotations?.[RESET_REQUEST_ANNOTATION];
  return {
    '/Runner': {
      dataDir: DATA_DIR,
      ...(spec.runnerTemplate.source && { template: spec.runnerTemplate.source }),
      updateTemplate: spec.runnerTemplate.update,
      ...afterQemuEnds(vm),
      ...(resetRequest && { resetRequest }),
      ...(options.hasDisplaySecret && { displaySecretDir: DISPLAY_SECRET_DIR }),
      ...(cloudInit && { cloudInit }),
      ...(spec.sysprep && { sysprepDir: SYSPREP_SECRET_DIR }),
      vm: {
        name: vm.metadata.name,
        ...(def.machineUuid && { uuid: def.machineUuid }),
        ...(options.kvm === false && { accelerator: 'tcg' }),
        useTpm: def.useTpm,
        firmware: def.firmware,
        bootMenu: def.bootMenu,
        powerdownTimeout: def.powerdownTimeout,
        // 'host' (the default) needs KVM. Emulating, QEMU's own default model stands in: what
        // the test guests always ran with, and it migrates ('max' does not everywhere).
        cpuModel: options.kvm === false && (def.cpuModel ?? 'host') === 'host' ? 'qemu64' : def.cpuModel,
        maximumCpus: maximum,
        currentCpus: def.currentCpus ?? maximum,
        ...(def.cpuTopology && {
          sockets: def.cpuTopology.sockets,
          diesPerSocket: def.cpuTopology.diesPerSocket,
          coresPerDie: def.cpuTopology.coresPerDie,
          threadsPerCore: def.cpuTopology.threadsPerCore,
        }),
        maximumRam: def.maximumRam,
        ...(def.currentRam !== undefined && { currentRam: def.currentRam }),
        rtcBase: def.rtcBase,
        rtcClock: def.rtcClock,
        network: def.networks.map((network, index) => {
          if (network.tap)
            return {
              type: 'tap' as const,
              device: network.tap.device,
              bridge: network.tap.bridge,
              mac: network.tap.mac,
            };
          if (routed && index === routedNetworkIndex(vm))
            return {
              type: 'routed' as const,
              device: network.user!.device,
              mac: routed.mac,
              address: routed.address,
              // The runner relays these TCP ports from the pod's address to the guest's.
              ...(network.user!.ports?.length && { ports: network.user!.ports }),
            };
          return {
            type: 'user' as const,
            device: network.user!.device,
            net: network.user!.net,
            // Absent when none: a running VM's config stays as it was before guest ports existed.
            ...(network.user!.ports?.length && { ports: network.user!.ports }),
          };
        }),
        drives: def.disks.flatMap((disk, index): RunnerDrive[] => {
          if (disk.cdrom)
            return [{ type: 'ide-cd' as const, file: disk.cdrom.image, bootindex: disk.bootindex }];
          const volume = diskVolumeName(disk, index);
          if (options.podDisks && !options.podDisks.has(volume)) return [];
          const size = options.diskSizes?.[volume];
          return [{ type: 'raw' as const, resource: `/dev/${volume}`, bootindex: disk.bootindex, size }];
        }),
        ...(options.hotplugDisks?.length && { hotplugDisks: options.hotplugDisks }),
        ...(options.snapshotCopy && { snapshotCopy: options.snapshotCopy }),
        display: {
          outputs: def.display.outputs,
          ...(def.display.loggedInUser && { loggedInUser: def.display.loggedInUser }),
          ...(def.display.spice && {
            spice: {
              port: def.display.spice.port,
              usbRedirects: def.display.spice.usbRedirects,
              ...(def.display.spice.streamingVideo && { streamingVideo: def.display.spice.streamingVideo }),
            },
          }),
          ...(def.display.vnc && { vnc: { port: def.display.vnc.port } }),
        },
      },
    },
  };
}

/**
 * Checks the derived config with the runner's own schema: whatever the runner would reject
 * (e.g. a RAM size it cannot parse) is reported on the VM instead of crash-looping a pod.
 */
export interface RenderedRunnerConfig {
  /** The config.yaml text. */
  yaml: string;
  /** configDigest() of it: what the runner reports once it has this config. */
  digest: string;
  /** What the runner would reject, by field (validateRunnerConfig). */
  errors: readonly string[];
}

/**
 * Rendered configs by their JSON: most reconciles (a runner's snapshot, a status change) render an
 * unchanged config, and YAML output and validation cost several times the JSON key. Bounded,
 * least recently used out first.
 */
const rendered = new Map<string, RenderedRunnerConfig>();
const RENDERED_CAPACITY = 1024;

export function renderRunnerConfig(config: RunnerConfigInput): RenderedRunnerConfig {
  const json = JSON.stringify(config);
  let result = rendered.get(json);
  if (result === undefined) {
    // The JSON round trip drops undefined optionals, which YAML would otherwise write as null.
    const yaml = stringify(JSON.parse(json));
    // Frozen: one result serves many reconciles.
    const errors = Object.freeze(validateRunnerConfig(config));
    result = Object.freeze({ yaml, digest: configDigest(yaml), errors });
    if (rendered.size >= RENDERED_CAPACITY) rendered.delete(rendered.keys().next().value!);
  } else {
    rendered.delete(json);
  }
  rendered.set(json, result);
  return result;
}

export function validateRunnerConfig(config: RunnerConfigInput): string[] {
  const result = RunnerConfigFile.safeParse(config);
  if (result.success) return [];
  return result.error.issues.map((issue) => `runner config ${formatFieldPath(issue.path)}: ${issue.message}`);
}

/** Runner config fields under `vm.` whose VirtualMachine field has another name or place. */
const RENAMED_VM_FIELDS: Record<string, string> = {
  uuid: 'machineUuid',
  network: 'networks',
  drives: 'disks',
  sockets: 'cpuTopology.sockets',
  diesPerSocket: 'cpuTopology.diesPerSocket',
  coresPerDie: 'cpuTopology.coresPerDie',
  threadsPerCore: 'cpuTopology.threadsPerCore',
};

/**
 * The VirtualMachine field a runner config field (below "/Runner") comes from (see
 * desiredRunnerConfig), so what the runner reports is shown where the user can change it.
 */
export function specPathOfRunnerField(field: string): string {
  if (field === 'template') return 'spec.runnerTemplate.source';
  if (field === 'updateTemplate') return 'spec.runnerTemplate.update';
  if (field === 'displaySecretDir') return 'spec.vm.display.spice (display Secret)';
  const drive = /^vm\.drives\[(\d+)\]\.file$/.exec(field);
  if (drive) return `spec.vm.disks[${drive[1]}].cdrom.image`;
  if (field === 'cloudInit.secretDir') return 'spec.cloudInit.secretRef';
  if (field === 'sysprepDir') return 'spec.sysprep.secretRef';
  if (field.startsWith('cloudInit')) return `spec.${field}`;
  // A user network's ports are the runner's network's (it has no user/tap level).
  const ports = /^vm\.network\[(\d+)\]\.ports(.*)$/.exec(field);
  if (ports) return `spec.vm.networks[${ports[1]}].user.ports${ports[2]}`;
  const vmField = /^vm\.([A-Za-z]+)(.*)$/.exec(field);
  if (vmField) return `spec.vm.${RENAMED_VM_FIELDS[vmField[1]!] ?? vmField[1]}${vmField[2]}`;
  return `runner config ${field}`;
}
