import { z } from 'zod';
import { SnapshotCopyState } from './snapshot-copy.js';

/**
 * What a runner knows about its VM, published to Redis under `vmop:snapshot:<vm key>` after every
 * change. The reconciler folds the latest snapshot into the VirtualMachine's status.
 */

export const RUNNER_PHASES = ['starting', 'booting', 'running', 'stopping', 'stopped', 'failed'] as const;

export const DriveState = z.object({
  tray: z.enum(['open', 'closed']),
  /** The image in the drive (as configured), absent when the drive is empty. */
  medium: z.string().optional(),
  /** The guest has locked the tray (e.g. a mounted CD). */
  locked: z.boolean().optional(),
  /** A configured medium that waits for the guest to open the locked tray. */
  pendingMedium: z.string().optional(),
});

/** A disk attached at runtime (config vm.hotplugDisks), as the runner has it. */
export const HotplugDiskState = z.object({
  /** attaching: being added; attached: the guest has it; detaching: asked to let it go; failed: see message. */
  state: z.enum(['attaching', 'attached', 'detaching', 'failed']),
  message: z.string().optional(),
});

export const ConsoleClient = z.object({
  host: z.string(),
  port: z.string(),
  since: z.string(),
});

export const LastShutdown = z.object({
  /** True when the guest initiated it (power off from inside, or the reply to an ACPI power button). */
  guest: z.boolean(),
  /** qemu's SHUTDOWN reason, e.g. "guest-shutdown", "host-qmp-quit", "host-signal". */
  reason: z.string(),
  at: z.string(),
  /**
   * qemu's own line about it, where it says who: for host-signal `terminating on signal 15 from
   * pid 42 (kill)` (a sender in the pod) or `terminating on signal 15` (one outside it).
   */
  qemuSays: z.string().optional(),
});

/** A runner config field the runner cannot work with (a template or CD image that does not exist). */
export const RunnerConfigError = z.object({
  /** The field's path in the runner's config, e.g. `template` or `vm.drives[1].file`. */
  field: z.string(),
  message: z.string(),
});

/** Where a live migration of the VM stands, as the source or the target runner sees it. */
export const MigrationProgress = z.object({
  id: z.string(),
  role: z.enum(['source', 'target']),
  /**
   * listening: the source waits for the target; preparing: the target starts its QEMU;
   * mirroring: disks the target does not share are being copied; transferring: the memory is;
   * completed: the guest runs on the target; failed: it runs on the source, as before.
   */
  state: z.enum(['listening', 'preparing', 'mirroring', 'transferring', 'completed', 'failed']),
  /** The source's side channel port (on its pod's address). */
  port: z.number().int().optional(),
  message: z.string().optional(),
  /** QEMU's figures, once completed: how long the guest was paused, the whole, bytes sent. */
  downtimeMs: z.number().optional(),
  totalMs: z.number().optional(),
  bytes: z.number().optional(),
});

export const RunnerSnapshot = z.object({
  /** Increments with every published change of one runner start. */
  seq: z.number().int().nonnegative(),
  /** Unique per runner start, so a consumer can tell a restarted runner's seq 1 from an old one. */
  runId: z.string(),
  pod: z.string().optional(),
  /** The pod's uid (downward API): a restarted pod reuses the name, not the uid. */
  podUid: z.string().optional(),
  /** When this runner process started: tells a snapshot of the pod's current container from an older one's. */
  startedAt: z.string().optional(),
  /**
   * starting: processes are being started, qemu paused; booting: qemu runs, the guest has not yet
   * opened the vmop agent port; running: the guest has booted; stopping: shutting down;
   * stopped: qemu exited after a shutdown; failed: qemu crashed or could not start.
   */
  phase: z.enum(RUNNER_PHASES),
  qemuPid: z.number().int().optional(),
  cpus: z.number().int().nonnegative(),
  /** Bytes of RAM the guest has (from the balloon). */
  ram: z.number().nonnegative(),
  /** CD-ROM drives by qemu device id (cd0, cd1, ...). */
  drives: z.record(z.string(), DriveState),
  /** Disks attached at runtime, by volume. */
  hotplugDisks: z.record(z.string(), HotplugDiskState).optional(),
  /** A snapshot's copy of the disks (config vm.snapshotCopy), while it is configured. */
  snapshotCopy: SnapshotCopyState.optional(),
  /** Counts how often the display password was set in this run. */
  displayPasswordSerial: z.number().int().nonnegative().optional(),
  consoleClient: ConsoleClient.optional(),
  booted: z.boolean(),
  /** Who the vmop agent in the guest says is logged in (VM-Operator's auto-login). */
  loggedInUser: z.string().optional(),
  lastShutdown: LastShutdown.optional(),
  /** The runner was asked to stop (SIGTERM): a power-off that follows is the answer, not the guest's own idea. */
  stopRequested: z.boolean().optional(),
  /** The last reset request carried out (a fresh start counts: the guest started after it). */
  lastReset: z.object({ request: z.string(), at: z.string() }).optional(),
  /** configDigest() of the config.yaml the runner has (applied live, or waiting for a restart). */
  config: z.string().optional(),
  /** Config changes that only take effect after a restart: the field below "/Runner", as started and as configured. */
  restartChanges: z
    .array(z.object({ field: z.string(), current: z.unknown().optional(), desired: z.unknown().optional() }))
    .optional(),
  /** Why the runner failed, when phase is failed. */
  message: z.string().optional(),
  /** What qemu-guest-agent tells, while it runs in the guest. */
  guestAgent: z
    .object({
      connected: z.boolean(),
      /** guest-get-osinfo, as the agent returns it (id, name, pretty-name, version, kernel-release, …). */
      osinfo: z.record(z.string(), z.unknown()).optional(),
      /** The guest's IP addresses (guest-network-get-interfaces), without loopback and link-local ones. */
      addresses: z.array(z.string()).optional(),
    })
    .optional(),
  /** Set with phase failed when qemu never ran the guest (a start failure: the start back-off counts it). */
  startFailed: z.boolean().optional(),
  /** Set with phase failed when the config names something that is not there. */
  configError: RunnerConfigError.optional(),
  /** A live migration this runner takes part in (the last one of this run). */
  migration: MigrationProgress.optional(),
  updatedAt: z.string(),
});

export type RunnerPhase = (typeof RUNNER_PHASES)[number];
export type DriveState = z.infer<typeof DriveState>;
export type HotplugDiskState = z.infer<typeof HotplugDiskState>;
export type ConsoleClient = z.infer<typeof ConsoleClient>;
export type LastShutdown = z.infer<typeof LastShutdown>;
export type RunnerConfigError = z.infer<typeof RunnerConfigError>;
export type RunnerSnapshot = z.infer<typeof RunnerSnapshot>;
export type MigrationProgress = z.infer<typeof MigrationProgress>;

/**
 * The Redis key under which the runner of VM key `vmKey` (e.g. `vm:ns/name`) stores its snapshot;
 * a runner that started as a migration's target stores its own under `<that>@<pod>` (`suffix`),
 * so the source's and the target's never overwrite each other.
 */
export function snapshotRedisKey(vmKey: string, suffix = ''): string {
  return `vmop:snapshot:${vmKey}${suffix}`;
}

/** The suffix of a migration target's snapshot key (SNAPSHOT_SUFFIX_ENV in its pod). */
export const snapshotSuffixOf = (podName: string) => `@${podName}`;
export const SNAPSHOT_SUFFIX_ENV = 'VMOP_SNAPSHOT_SUFFIX';

/**
 * The work key a snapshot Redis key reports on: `vmop:snapshot:vm:ns/name`, a migration target's
 * `…@pod` and an import's `…#import/volume` all report on `vm:ns/name` (an image's on
 * `image:ns/name`); a usage history (`…#usage`) on none.
 */
export function workKeyOfSnapshotKey(redisKey: string): string | undefined {
  return /^vmop:snapshot:((?:vm|image):[a-z0-9-]+\/[^@#/]+)(?:@[^@#/]+|#import\/[^/]+)?$/.exec(redisKey)?.[1];
}
