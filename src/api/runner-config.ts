import { createHash } from 'node:crypto';
import { z } from 'zod';
import { NbdExport } from './nbd-export.js';
import { SnapshotCopyConfig } from './snapshot-copy.js';
import { parse as parseYaml } from 'yaml';

/**
 * The runner's configuration file: `{ "/Runner": RunnerSettings }`, the format of VM-Operator's
 * config-sample.yaml (field names kept). The controller renders exactly this structure into the
 * ConfigMap key `config.yaml`; the runner parses it with the same schema.
 */

/** Where a runner finds relative CD and boot image names (VM-Operator's path; the manager mounts the repository PVC here). */
export const DEFAULT_IMAGE_REPOSITORY = '/var/local/vmop-image-repository';

/**
 * Identifies a config.yaml text: the runner reports the digest of the config it has, the manager
 * compares it with the one it wrote (so it knows whether kubelet has delivered a change yet).
 */
export function configDigest(text: string): string {
  return createHash('sha256').update(text).digest('hex').slice(0, 16);
}

const KI = 2 ** 10;
const MI = 2 ** 20;
const GI = 2 ** 30;
const TI = 2 ** 40;
const MEMORY_UNITS: Record<string, number> = {
  ...{ '': 1, B: 1, k: 1e3, K: 1e3, kB: 1e3, KB: 1e3, M: 1e6, MB: 1e6, G: 1e9, GB: 1e9, T: 1e12, TB: 1e12 },
  ...{ Ki: KI, KiB: KI, Mi: MI, MiB: MI, Gi: GI, GiB: GI, Ti: TI, TiB: TI },
};

/** Bytes as a Kubernetes quantity, in the largest binary unit that divides them. */
export function formatBytes(bytes: number): string {
  for (const [unit, size] of [
    ['Ti', 2 ** 40],
    ['Gi', 2 ** 30],
    ['Mi', 2 ** 20],
    ['Ki', 2 ** 10],
  ] as const) {
    if (bytes >= size && bytes % size === 0) return `${bytes / size}${unit}`;
  }
  return String(bytes);
}

/**
 * Parses a memory size: a number of bytes, or a string like "4 GiB", "512Mi", "1.5G" (Kubernetes
 * quantity suffixes, SI and binary, optionally followed by "B"). Returns bytes, or undefined if invalid.
 */
export function parseMemorySize(value: string | number): number | undefined {
  if (typeof value === 'number') return Number.isFinite(value) && value >= 0 ? Math.round(value) : undefined;
  const match = /^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$/.exec(value);
  const factor = match ? MEMORY_UNITS[match[2]!] : undefined;
  if (!match || factor === undefined) return undefined;
  return Math.round(Number(match[1]) * factor);
}

export const MemorySize = z.union([z.number(), z.string()]).transform((value, ctx) => {
  const bytes = parseMemorySize(value);
  if (bytes === undefined) {
    ctx.addIssue({ code: 'custom', message: `not a memory size: ${JSON.stringify(value)}` });
    return z.NEVER;
  }
  return bytes;
});

const count = (defaultValue: number) => z.number().int().nonnegative().default(defaultValue);

/** A guest port a user network forwards from the same port of the runner pod (the VM's spec and the runner's config). */
export const GuestPort = z.object({
  port: z.number().int().min(1).max(65535).describe('The port, in the guest and on the runner pod.'),
  protocol: z.enum(['TCP', 'UDP']).default('TCP'),
});

export const NetworkConfig = z.object({
  /**
   * "tap" attaches to a host bridge; "user" is qemu's user networking (NAT in the pod); "routed"
   * is the pod's tap that carries the VM's own address (src/api/vm-network.ts): the runner answers
   * the guest's DHCP with it.
   */
  type: z.enum(['tap', 'user', 'routed']).default('tap'),
  bridge: z.string().optional(),
  device: z.string().default('virtio-net'),
  mac: z.string().optional(),
  net: z.string().optional(),
  /** A routed network's address (the VM's own). */
  address: z.ipv4().optional(),
  /**
   * The guest ports that reach the guest from the same port of the pod's address: QEMU forwards a
   * user network's, the runner relays a routed network's (TCP only).
   */
  ports: z.array(GuestPort).optional(),
});

export const DriveConfig = z
  .object({
    /** "raw": a disk (file or block device); "ide-cd": a CD-ROM drive (the name is VM-Operator's). */
    type: z.enum(['raw', 'ide-cd']).default('raw'),
    bootindex: z.number().int().nonnegative().optional(),
    /** raw: a regular file is used as file, anything else as block device (e.g. /dev/system-disk). */
    resource: z.string().optional(),
    /**
     * raw: a disk image file. ide-cd: the medium; an absolute path, a URL or a name relative to the
     * image repository; empty means no medium.
     */
    file: z.string().optional(),
    device: z.string().optional(),
    /** raw: the size the disk's volume has now (it may have grown since the start): the guest gets it. */
    size: MemorySize.optional(),
  })
  .superRefine((drive, ctx) => {
    if (drive.type === 'raw' && drive.resource === undefined && !drive.file && !drive.device) {
      ctx.addIssue({ code: 'custom', message: 'a raw drive needs "resource", "file" or "device"' });
    }
  });

/**
 * A disk added while the VM runs (vmop's extension): its claim is exported over NBD with TLS-PSK by
 * a helper pod, and the runner attaches it to the running QEMU (SCSI on the `hotplug-scsi`
 * controller). Absent from the list: detached. It is a plain drive from the next start on.
 */
export const HotplugDiskConfig = NbdExport;

export const SpiceConfig = z.object({
  port: z.number().int().min(0).max(65535).default(5900),
  ticket: z.string().optional(),
  streamingVideo: z.string().optional(),
  usbRedirects: count(2),
});

/** QEMU's VNC server on 127.0.0.1 at this port (display port - 5900), password always on. */
export const VncConfig = z.object({
  port: z.number().int().min(5900).max(65535).default(5901),
});

export const DisplayConfig = z.object({
  outputs: z.number().int().positive().default(1),
  loggedInUser: z.string().optional(),
  spice: SpiceConfig.optional(),
  vnc: VncConfig.optional(),
});

export const FIRMWARE_TYPES = ['bios', 'uefi', 'uefi-4m', 'secure', 'secure-4m'] as const;

export const VmConfig = z
  .object({
    name: z.string().min(1),
    uuid: z.string().optional(),
    useTpm: z.boolean().default(false),
    firmware: z.enum(FIRMWARE_TYPES).default('uefi'),
    bootMenu: z.boolean().default(false),
    /** Seconds to wait for the guest to power down after SIGTERM before qemu is stopped. */
    powerdownTimeout: count(900),
    cpuModel: z.string().default('host'),
    maximumCpus: z.number().int().positive().default(1),
    currentCpus: z.number().int().positive().default(1),
    sockets: count(0),
    diesPerSocket: count(0),
    coresPerDie: count(0),
    threadsPerCore: count(0),
    accelerator: z.string().default('kvm'),
    maximumRam: MemorySize.default(2 ** 30),
    /** Defaults to maximumRam. */
    currentRam: MemorySize.optional(),
    rtcBase: z.string().default('utc'),
    rtcClock: z.string().default('rt'),
    network: z.array(NetworkConfig).default([{ type: 'tap', device: 'virtio-net' }]),
    drives: z.array(DriveConfig).default([]),
    hotplugDisks: z.array(HotplugDiskConfig).default([]),
    /** A snapshot's copy of the running VM's disks, while the snapshot asks for it. */
    snapshotCopy: SnapshotCopyConfig.optional(),
    display: DisplayConfig.prefault({}),
  })
  // As upstream: a currentCpus above maximumCpus raises the maximum.
  .transform((vm) => ({ ...vm, maximumCpus: Math.max(vm.maximumCpus, vm.currentCpus) }))
  .superRefine((vm, ctx) => {
    if (vm.currentRam !== undefined && vm.currentRam > vm.maximumRam) {
      ctx.addIssue({ code: 'custom', path: ['currentRam'], message: 'must not exceed maximumRam' });
    }
  });

/** NoCloud data; each part is copied as YAML into its file (user-data gets "#cloud-config" prepended). */
export const CloudInitConfig = z.object({
  metaData: z.record(z.string(), z.unknown()).optional(),
  userData: z.record(z.string(), z.unknown()).optional(),
  networkConfig: z.record(z.string(), z.unknown()).optional(),
  /**
   * A directory with the files of a cloud-init Secret (a projected volume): its user-data and
   * network-config are used as written, its meta-data is merged over `metaData`.
   */
  secretDir: z.string().optional(),
});

const AfterQemuEnds = z.enum(['restart', 'waitForStop']);

export const RunnerSettings = z.object({
  /** Persistent files (uuid, firmware vars, TPM state, template copy). Default: XDG data home. */
  dataDir: z.string().optional(),
  /** Sockets and other runtime files. Default: XDG runtime dir. */
  runtimeDir: z.string().optional(),
  /** The VM type: a Liquid template searched in /opt/vmrunner/templates, then the shipped templates. */
  template: z.string().default('standard-vm.liquid'),
  /** The template is copied to dataDir on first start; later starts use the copy unless this is set. */
  updateTemplate: z.boolean().default(false),
  /**
   * When qemu ends without a stop request: `restart` exits the runner (kubelet starts it again);
   * `waitForStop` keeps it, reporting, until the operator has set the VM to Stopped.
   */
  whenGuestPowersOff: AfterQemuEnds.default('restart'),
  /** VM-Operator's runner field: true means the same as whenGuestPowersOff `waitForStop`. */
  guestShutdownStops: z.boolean().default(false),
  /** The same for a qemu that crashed or could not start. */
  whenQemuFails: AfterQemuEnds.default('restart'),
  /**
   * When qemu failed before the guest ever ran and whenQemuFails is `restart`: `exit` (kubelet's
   * restart back-off applies) or `waitForRetry`: stay, reporting, until the operator replaces the
   * pod when its own start back-off has passed.
   */
  whenStartFails: z.enum(['exit', 'waitForRetry']).default('exit'),
  /** A request for a hard reset of the guest (a Reset operation's name): carried out when it changes. */
  resetRequest: z.string().optional(),
  /** Where relative CD image names resolve. Default: $VMOP_IMAGE_REPOSITORY or /var/local/vmop-image-repository. */
  imageRepository: z.string().optional(),
  /**
   * Directory with the files `display-password` and `password-expiry` (a Secret projected next to
   * the config, as upstream does). Default: the config file's directory.
   */
  displaySecretDir: z.string().optional(),
  cloudInit: CloudInitConfig.optional(),
  /** A directory with autounattend.xml and/or unattend.xml (a Secret): attached as a CD for Windows Setup. */
  sysprepDir: z.string().optional(),
  vm: VmConfig,
});

export const RunnerConfigFile = z.object({ '/Runner': RunnerSettings });

/** What the controller writes (memory sizes may be strings, defaults may be left out). */
export type RunnerConfigInput = z.input<typeof RunnerConfigFile>;
/** What the runner works with (defaults applied, memory sizes in bytes). */
export type RunnerConfig = z.output<typeof RunnerConfigFile>;
export type RunnerSettings = z.output<typeof RunnerSettings>;
export type VmConfig = z.output<typeof VmConfig>;
export type DriveConfig = z.output<typeof DriveConfig>;
export type HotplugDiskConfig = z.output<typeof HotplugDiskConfig>;
export type CloudInitConfig = z.output<typeof CloudInitConfig>;

export type ParseResult = { ok: true; config: RunnerConfig } | { ok: false; errors: string[] };

/** Renders a zod issue path the way a user finds the field in the file: `"/Runner".vm.drives[0].file`. */
export function formatFieldPath(path: ReadonlyArray<PropertyKey>): string {
  return path
    .map((key, index) => {
      if (typeof key === 'number') return `[${key}]`;
      const name = String(key);
      const quoted = /^[A-Za-z_][A-Za-z0-9_-]*$/.test(name) ? name : JSON.stringify(name);
      return index === 0 ? quoted : `.${quoted}`;
    })
    .join('');
}

/** Parses and validates the YAML text of a config file; errors name the field path. */
export function parseRunnerConfig(yamlText: string): ParseResult {
  let document: unknown;
  try {
    document = parseYaml(yamlText);
  } catch (err) {
    return { ok: false, errors: [`not valid YAML: ${(err as Error).message}`] };
  }
  const result = RunnerConfigFile.safeParse(document ?? {});
  if (result.success) return { ok: true, config: result.data };
  return {
    ok: false,
    errors: result.error.issues.map((issue) => {
      const message = issue.message.replace(/^Invalid input: /, '');
      return issue.path.length > 0 ? `${formatFieldPath(issue.path)}: ${message}` : message;
    }),
  };
}
