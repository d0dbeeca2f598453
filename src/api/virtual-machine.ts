// The VirtualMachine custom resource (vmoperator.jdrupes.org/v1), as VM-Operator defines it.
// This schema is the single source of truth: TypeScript types, runtime validation and the
// generated CRD (crds/) all come from it. Defaults follow VM-Operator's CRD.
import { z } from 'zod';
import { GuestPort } from './runner-config.js';
import { SnapshotCopyState } from './snapshot-copy.js';
import {
  Affinity,
  EmbeddedObjectMeta,
  PersistentVolumeClaimSpec,
  Quantity,
  ResourceRequirements,
  Toleration,
} from './kubernetes-types.js';

export const GROUP = 'vmoperator.jdrupes.org';
export const VERSION = 'v1';
export const API_VERSION = `${GROUP}/${VERSION}`;
export const KIND = 'VirtualMachine';
export const PLURAL = 'vms';
export const SINGULAR = 'vm';

/** A CEL rule the apiserver checks; `fieldPath` makes the rejection name the offending field. */
function celRules(...rules: Array<{ rule: string; message: string; fieldPath?: string }>) {
  return { 'x-kubernetes-validations': rules };
}

const RunnerImage = z
  .object({
    source: z.string().optional().describe('The runner image in one line (repo/path[:version]).'),
    repository: z.string().optional(),
    path: z.string().optional(),
    version: z.string().optional(),
    pullPolicy: z.enum(['Always', 'Never', 'IfNotPresent']).optional(),
  })
  .describe("The image to use for the runner pod. Defaults to the manager's configured runner image.")
  .meta(
    celRules({
      rule: 'has(self.source) != (has(self.repository) && has(self.path))',
      message: 'specify either image.source, or image.repository and image.path',
    }),
  );

const CpuTopology = z.object({
  sockets: z.number().int().min(0).default(1),
  diesPerSocket: z.number().int().min(0).default(0),
  coresPerDie: z.number().int().min(0).default(0),
  threadsPerCore: z.number().int().min(0).default(0),
});

const NetworkDevice = z.string().max(64).default('virtio-net');

const MAX_GUEST_PORTS = 32;

const Network = z
  .object({
    tap: z
      .object({
        device: NetworkDevice,
        bridge: z.string().max(64).default('br0'),
        mac: z.string().max(32).optional(),
      })
      .optional(),
    user: z
      .object({
        device: NetworkDevice,
        net: z.string().max(64).optional(),
        ports: z
          .array(GuestPort)
          .max(MAX_GUEST_PORTS)
          .optional()
          .meta(
            celRules({
              rule: 'self.all(p, self.exists_one(q, q.port == p.port && q.protocol == p.protocol))',
              message: 'each port and protocol at most once',
            }),
          )
          .describe(
            "Guest ports that answer at the runner pod's address: QEMU forwards the pod's port P to the guest's port P, so Services, `kubectl port-forward` and NetworkPolicies reach them as they reach a pod's. Taken at the next start. On the network that carries the VM's own address (virtualMachineIPAddressName), vmop's runner relays the TCP ones from the pod's address to the guest's (UDP is reached at the guest's address only).",
          ),
      })
      .optional(),
  })
  .meta(
    celRules({ rule: 'has(self.tap) != has(self.user)', message: 'a network is exactly one of tap or user' }),
  );

/** Where imported content comes from (a disk's, an image's). */
const importSources = {
  http: z
    .object({
      url: z
        .string()
        .max(4096)
        .regex(/^https?:\/\/\S+$/, 'an http:// or https:// URL')
        .describe('An image to download: raw or qcow2, either one may be compressed with xz or gzip.'),
      sha256: z
        .string()
        .regex(/^[0-9a-f]{64}$/, '64 lower-case hex digits')
        .optional()
        .describe('The SHA-256 of the file as downloaded; a mismatch fails the import.'),
      caCertificate: z
        .string()
        .max(65536)
        .regex(/^\s*-----BEGIN CERTIFICATE-----/, 'PEM certificates (-----BEGIN CERTIFICATE-----)')
        .optional()
        .describe(
          "PEM certificates an https:// server's must chain to, instead of the system's CAs (a VirtualMachineExport's status.certificate, a private CA).",
        ),
    })
    .optional()
    .describe('Download the image over HTTP(S).'),
  registry: z
    .object({
      image: z
        .string()
        .max(1024)
        .regex(/^\S+$/, 'an image reference like registry.example/disks/debian:12')
        .describe("An OCI image laid out as KubeVirt's containerDisks: the disk image file under /disk/."),
      insecure: z
        .boolean()
        .optional()
        .describe('The registry speaks plain HTTP (one inside the cluster, say).'),
    })
    .optional()
    .describe(
      'Pull the disk from an image in a registry (anonymously); each layer is checked against its digest.',
    ),
  pvc: z
    .object({ name: z.string().min(1).max(253).describe("A Block claim in the VM's namespace.") })
    .optional()
    .describe(
      "Copy another claim (another VM's disk, an image imported once for many): its whole content, zero runs skipped. It must be attachable where the copy runs (not in use on another node unless ReadWriteMany).",
    ),
};

/** An image sent by a person rather than fetched (an image's source only). */
export const UploadSource = z
  .object({
    sha256: z
      .string()
      .regex(/^[0-9a-f]{64}$/, '64 lower-case hex digits')
      .optional()
      .describe('The SHA-256 of the file as sent; a mismatch fails the import.'),
  })
  .describe(
    "Receive the image from a person: `vmop image upload FILE --name NAME`, or the GUI's Images page, through the image's importer pod (HTTPS with the image's certificate, the token in Secret <name>-upload; resumable).",
  );

/** Where a VirtualMachineImage's content comes from: exactly one of these. */
export const ImageSource = z.object({ ...importSources, upload: UploadSource.optional() }).meta(
  celRules({
    rule: '[has(self.http), has(self.registry), has(self.pvc), has(self.upload)].filter(x, x).size() == 1',
    message: 'a source is exactly one of http, registry, pvc or upload',
  }),
);

/** Where an imported disk's content comes from: exactly one of these. */
export const DiskSource = z
  .object({
    ...importSources,
    image: z
      .object({ name: z.string().min(1).max(253).describe("A VirtualMachineImage in the VM's namespace.") })
      .optional()
      .describe(
        'Copy a VirtualMachineImage (imported once, for many disks): the disk waits until the image is Ready.',
      ),
  })
  .meta(
    celRules({
      rule: '[has(self.http), has(self.registry), has(self.pvc), has(self.image)].filter(x, x).size() == 1',
      message: 'a source is exactly one of http, registry, pvc or image',
    }),
  );

export const Disk = z
  .object({
    volumeClaimTemplate: z
      .object({ metadata: EmbeddedObjectMeta.optional(), spec: PersistentVolumeClaimSpec.optional() })
      .optional()
      .describe('A PVC template providing the disk; the disk appears as /dev/<name>-disk in the runner.'),
    cdrom: z
      .object({
        image: z
          .string()
          .max(4096)
          .describe('Path, URL or image-repository name of the medium; empty means an empty drive.'),
      })
      .optional(),
    bootindex: z.number().int().min(0).optional(),
    source: DiskSource.optional().describe(
      "Where the disk's first content comes from: vmop imports it into the disk's claim before the VM first starts (a claim that existed before is never overwritten).",
    ),
  })
  .meta(
    celRules(
      {
        rule: 'has(self.volumeClaimTemplate) != has(self.cdrom)',
        message: 'a disk is exactly one of volumeClaimTemplate or cdrom',
      },
      {
        rule: '!has(self.source) || has(self.volumeClaimTemplate)',
        message: 'a source fills a disk on a claim (volumeClaimTemplate)',
        fieldPath: '.source',
      },
    ),
  );

export const PERMISSIONS = ['start', 'stop', 'reset', 'accessConsole', 'takeConsole', '*'] as const;

/** VM-Operator's grant: a user or a role (exactly one), and what they may ('*': everything). */
export function permissionGrant(defaultMay: Array<(typeof PERMISSIONS)[number]>) {
  return z
    .object({
      user: z.string().max(253).optional(),
      role: z.string().max(253).optional(),
      may: z.array(z.enum(PERMISSIONS)).default(defaultMay),
    })
    .meta(
      celRules({
        rule: 'has(self.user) != has(self.role)',
        message: 'a permission names either a user or a role',
      }),
    );
}

const Spice = z.object({
  port: z.number().int().min(1).max(65535).default(5900),
  server: z.string().optional(),
  generateSecret: z.boolean().default(true),
  proxyUrl: z.string().optional(),
  streamingVideo: z.string().optional(),
  usbRedirects: z.number().int().min(0).default(2),
});

/** VNC display N listens at 5900 + N: the port picks the display. */
export const VNC_BASE_PORT = 5900;

const Vnc = z
  .object({
    port: z.number().int().min(VNC_BASE_PORT).max(65535).default(5901),
  })
  .describe(
    "A VNC display: QEMU's VNC server on the runner pod's loopback only, reached through the Kubernetes API's port-forward (`vmop vm vnc`, the web GUI). Always locked by the display Secret's password (one is generated when there is none); VNC's authentication uses its first 8 characters.",
  );

const Display = z.object({
  outputs: z.number().int().min(0).default(1),
  loggedInUser: z
    .string()
    .max(256)
    .regex(/^[^\s]+$/, 'a user name without spaces or line breaks')
    .optional()
    .describe(
      "VM-Operator's auto-login: the vmop agent in the guest logs this user in (and out when it goes); status.loggedInUser says who is.",
    ),
  spice: Spice.optional(),
  vnc: Vnc.optional(),
});

/** A share of a core, e.g. `10%`. */
export const CoreFraction = z
  .string()
  .regex(/^(100|[1-9][0-9]?)%$/, 'a core fraction is a percentage from 1% to 100%, e.g. 10%');

const MAX_DISKS = 32;
const MAX_NETWORKS = 16;

export const VmDefinition = z
  .object({
    state: z.enum(['Running', 'Stopped']).default('Stopped').describe('The desired state of the VM.'),
    machineUuid: z.string().max(64).optional(),
    useTpm: z.boolean().default(false),
    firmware: z.enum(['bios', 'uefi', 'uefi-4m', 'secure', 'secure-4m']).default('uefi'),
    bootMenu: z.boolean().default(false),
    powerdownTimeout: z
      .number()
      .int()
      .min(0)
      .default(900)
      .describe('Seconds a graceful powerdown may take before qemu is stopped.'),
    cpuModel: z
      .string()
      .max(128)
      .optional()
      .describe("QEMU's CPU model; default the class's (virtualMachineClassName), else host."),
    virtualMachineClassName: z
      .string()
      .max(253)
      .optional()
      .describe('The VirtualMachineClass the VM is of; the default class when absent (if one is marked).'),
    virtualMachineIPAddressName: z
      .string()
      .max(253)
      .optional()
      .describe(
        "The VirtualMachineIPAddress (of the VM's namespace) whose address the VM has; where VM subnets are configured vmop makes one when absent.",
      ),
    coreFraction: CoreFraction.optional().describe(
      "The share of each CPU the runner pod requests, e.g. 10%; default the class policy's, else the chart's CPU overcommit.",
    ),
    maximumCpus: z
      .number()
      .int()
      .min(1)
      .max(1024)
      .optional()
      .describe('Either maximumCpus or cpuTopology; 4 when neither is given.'),
    cpuTopology: CpuTopology.optional(),
    currentCpus: z.number().int().min(1).max(1024).optional().describe('Defaults to maximumCpus.'),
    maximumRam: Quantity.default('1G'),
    currentRam: Quantity.optional().describe('Defaults to maximumRam.'),
    rtcBase: z.string().max(64).default('utc'),
    rtcClock: z.string().max(64).default('rt'),
    networks: z.array(Network).max(MAX_NETWORKS).default([]),
    disks: z.array(Disk).max(MAX_DISKS).default([]),
    display: Display.default({ outputs: 1, spice: { port: 5900, generateSecret: true, usbRedirects: 2 } }),
  })
  .meta(
    celRules(
      {
        rule: '!(has(self.maximumCpus) && has(self.cpuTopology))',
        message: 'specify either maximumCpus or cpuTopology, not both',
      },
      {
        rule: '!has(self.currentCpus) || !has(self.maximumCpus) || self.currentCpus <= self.maximumCpus',
        message: 'currentCpus must not exceed maximumCpus',
        fieldPath: '.currentCpus',
      },
      {
        rule: '!has(self.currentRam) || quantity(string(self.currentRam)).compareTo(quantity(string(self.maximumRam))) <= 0',
        message: 'currentRam must not exceed maximumRam',
        fieldPath: '.currentRam',
      },
      {
        rule:
          'self.disks.filter(d, has(d.volumeClaimTemplate) && has(d.volumeClaimTemplate.metadata) && has(d.volumeClaimTemplate.metadata.name))' +
          '.all(d, self.disks.filter(e, has(e.volumeClaimTemplate) && has(e.volumeClaimTemplate.metadata) && has(e.volumeClaimTemplate.metadata.name)' +
          ' && e.volumeClaimTemplate.metadata.name == d.volumeClaimTemplate.metadata.name).size() == 1)',
        message: 'disk names (volumeClaimTemplate.metadata.name) must be unique',
        fieldPath: '.disks',
      },
    ),
  );

const ServiceOverrides = z.object({
  labels: z.record(z.string(), z.string().nullable()).optional(),
  annotations: z.record(z.string(), z.string().nullable()).optional(),
});

/** No schema for these, as VM-Operator documents: copied to cloud-init unchecked. */
const FreeForm = z.record(z.string(), z.unknown()).meta({ 'x-kubernetes-preserve-unknown-fields': true });

const SecretRef = z.object({ name: z.string().min(1).max(253) });

export const RUN_POLICIES = ['AlwaysOn', 'AlwaysOnUnlessStoppedManually', 'Manual', 'AlwaysOff'] as const;

export const RunPolicy = z
  .enum(RUN_POLICIES)
  .describe(
    "What keeps the VM running (Deckhouse's policies; see the README). Without it, spec.vm.state and guestShutdownStops decide, as in VM-Operator.",
  );

export const EvictionStrategy = z
  .enum(['LiveMigrate', 'LiveMigrateIfPossible', 'None'])
  .describe(
    "What an eviction (a node drain, an Evict operation) does to the running VM (KubeVirt's): LiveMigrate moves it live and refuses the eviction while it cannot; LiveMigrateIfPossible moves it live when it can, else shuts it down for a start elsewhere; None always does the latter. Default: the manager's (--eviction-strategy).",
  );

export const VirtualMachineSpec = z
  .object({
    image: RunnerImage.optional(),
    runPolicy: RunPolicy.optional(),
    evictionStrategy: EvictionStrategy.optional(),
    disruptions: z
      .object({
        restartApprovalMode: z
          .enum(['Manual', 'Automatic'])
          .default('Manual')
          .describe(
            'Manual: a change that needs a restart waits for one (status.restartAwaitingChanges); Automatic: vmop restarts the VM itself.',
          ),
      })
      .optional(),
    runnerTemplate: z
      .object({
        source: z.string().max(253).optional().describe('The runner template (VM type) to use.'),
        update: z
          .boolean()
          .default(true)
          .describe("Whether a running VM's data dir copy of the template is updated."),
      })
      .default({ update: true }),
    guestShutdownStops: z
      .boolean()
      .default(false)
      .describe('If true, a shutdown by the guest sets spec.vm.state to Stopped.'),
    loadBalancerService: ServiceOverrides.optional(),
    cloudInit: z
      .object({
        metaData: z.record(z.string(), z.string()).optional(),
        userData: FreeForm.optional(),
        networkConfig: FreeForm.optional(),
        secretRef: SecretRef.optional().describe(
          'A Secret in the namespace with userData (or userdata) and optionally metaData and networkConfig (or networkData): passwords stay out of the VM. The values are used as written; a change is used at the next start, with a new instance-id.',
        ),
      })
      .meta(
        celRules({
          rule: '!has(self.secretRef) || (!has(self.userData) && !has(self.networkConfig))',
          message: 'with cloudInit.secretRef, userData and networkConfig come from the Secret',
          fieldPath: '.secretRef',
        }),
      )
      .optional(),
    sysprep: z
      .object({
        secretRef: SecretRef.describe(
          'A Secret with autounattend.xml and/or unattend.xml: attached as a CD-ROM that Windows Setup reads.',
        ),
      })
      .optional(),
    permissions: z
      .array(permissionGrant([]))
      .optional()
      .describe(
        'Who may do what with the VM besides those Kubernetes RBAC lets (in the web GUI): a user or a role (an OIDC group), and what they may.',
      ),
    pools: z
      .array(z.string().max(253))
      .default([])
      .describe('The VmPools the VM belongs to: a person with a permission on the pool gets it assigned.'),
    loggingProperties: z.string().optional().describe('Accepted for VM-Operator compatibility.'),
    resources: ResourceRequirements.optional(),
    nodeName: z.string().optional(),
    nodeSelector: z.record(z.string(), z.string()).optional(),
    affinity: Affinity.optional(),
    tolerations: z.array(Toleration).optional(),
    vm: VmDefinition,
  })
  .meta(
    celRules(
      {
        rule: "!has(self.runPolicy) || self.runPolicy != 'AlwaysOn' || self.vm.state == 'Running'",
        message: 'runPolicy AlwaysOn keeps the VM running: spec.vm.state must be Running',
        fieldPath: '.vm.state',
      },
      {
        rule: "!has(self.runPolicy) || self.runPolicy != 'AlwaysOff' || self.vm.state == 'Stopped'",
        message: 'runPolicy AlwaysOff keeps the VM off: spec.vm.state must be Stopped',
        fieldPath: '.vm.state',
      },
      {
        rule: "!has(self.runPolicy) || self.runPolicy != 'AlwaysOn' || !self.guestShutdownStops",
        message: 'runPolicy AlwaysOn restarts a VM whose guest powered off: guestShutdownStops must be false',
        fieldPath: '.guestShutdownStops',
      },
    ),
  );

export const Condition = z.object({
  type: z.string(),
  status: z.enum(['True', 'False', 'Unknown']),
  observedGeneration: z.number().int().optional(),
  lastTransitionTime: z.string(),
  reason: z.string(),
  message: z.string(),
});

/**
 * The longest VM name that works: the runner StatefulSet has the VM's name, and its pods get the
 * label controller-revision-hash=`<name>-<10 character hash>`, which must fit a label value's 63.
 */
export const MAX_VM_NAME_LENGTH = 52;

/** Values of any JSON type (a spec field's value before and after a change). */
const AnyValue = z.unknown().meta({ 'x-kubernetes-preserve-unknown-fields': true });

export const RestartAwaitingChange = z.object({
  operation: z.enum(['add', 'remove', 'replace']),
  /** The spec field, e.g. `spec.vm.maximumCpus`. */
  path: z.string(),
  currentValue: AnyValue.optional(),
  desiredValue: AnyValue.optional(),
});

/** KubeVirt's startFailure: runner starts that failed before the guest ran, and when vmop tries again. */
export const StartFailure = z.object({
  /** Failures in a row; 0 after a Start or Restart operation reset the back-off. */
  consecutiveFailCount: z.number().int(),
  /** The runner start (runId) counted last: each is counted once. */
  lastFailedRunId: z.string(),
  lastFailureTime: z.string(),
  /** When vmop starts the VM again (absent while nothing waits). */
  retryAfter: z.string().optional(),
  /** The Start or Restart operation (start-request annotation) the count belongs to. */
  startRequest: z.string().optional(),
});

export const VmPhase = z.enum([
  'Pending',
  'Starting',
  'Running',
  'Migrating',
  'Stopping',
  'Stopped',
  'Failed',
  /** Its node stopped reporting: the VM may run there or not. */
  'Unknown',
]);

/** The VM's last live migration (KubeVirt's migrationState). */
export const MigrationState = z.object({
  /** The migration's id (from the operation that asked for it). */
  id: z.string(),
  /** The VirtualMachineOperation that asked for it. */
  operation: z.string().optional(),
  sourceNode: z.string().optional(),
  sourcePod: z.string(),
  targetNode: z.string().optional(),
  targetPod: z.string().optional(),
  /** The node the target must run on (the operation's spec.migrate.nodeName). */
  requestedNode: z.string().optional(),
  startTimestamp: z.string(),
  endTimestamp: z.string().optional(),
  /** Why it has not started yet (the chart's migration limits); absent once it started. */
  waiting: z.string().optional(),
  /** Absent while it is under way. */
  result: z.enum(['Succeeded', 'Failed']).optional(),
  message: z.string().optional(),
  /** How long the guest was paused at the switch-over (QEMU's figure). */
  downtimeMs: z.number().optional(),
  /** How long QEMU sent the guest (disks, memory and state), from its start to the switch-over. */
  transferMs: z.number().optional(),
  /** Memory, device state and copied disks, as sent. */
  bytesTransferred: z.number().optional(),
  /** The disks copied to the target (node-local ones), by volume. */
  copiedDisks: z.array(z.string()).optional(),
});

/**
 * A disk added to (or removed from) the spec while the VM runs, on its way into or out of the
 * running guest. Pending: its claim or export is not there yet (reason says why); InProgress: the
 * runner attaches it; Attached: the guest has it; Detaching: the guest lets it go; Failed: see
 * message. A disk the VM started with is not detached while it runs (it goes at the next restart).
 */
export const DiskAttachment = z.object({
  phase: z.enum(['Pending', 'InProgress', 'Attached', 'Detaching', 'Failed']),
  reason: z.string(),
  message: z.string().optional(),
});

export const Assignment = z.object({ pool: z.string(), user: z.string(), lastUsed: z.string() });

/** A disk of the VM as it is: its claim, how big that is, and how big the guest sees it. */
export const DiskStatus = z.object({
  /** The disk's volume (`<name>-disk`, its device in the runner is /dev/<volume>). */
  name: z.string(),
  /** The claim that backs it. */
  claim: z.string(),
  /** What the claim holds now (its status.capacity). */
  capacity: z.string().optional(),
  /**
   * Ready; Resizing: its claim grows to the spec's size (the running guest then sees it);
   * Importing: its source is being written into it (the VM waits); Failed: the import failed (message).
   */
  phase: z.enum(['Pending', 'Importing', 'Resizing', 'Ready', 'Failed']),
  /** While importing: how far, e.g. "42%" (of the download; of the conversion after it for qcow2). */
  progress: z.string().optional(),
  /** While importing: the bytes downloaded so far. */
  importedBytes: z.number().int().optional(),
  message: z.string().optional(),
  /** Only for a disk added or removed while the VM runs. */
  attachment: DiskAttachment.optional(),
});

export const VirtualMachineStatus = z.object({
  phase: VmPhase.optional(),
  observedGeneration: z.number().int().optional(),
  conditions: z.array(Condition).optional(),
  node: z.string().optional(),
  cpus: z.number().int().optional(),
  ram: z.string().optional(),
  /** The VirtualMachineClass the runner pod was made from (named, or the default). */
  virtualMachineClassName: z.string().optional(),
  /** The share of each CPU the runner pod requests (its own, or its class's). */
  coreFraction: z.string().optional(),
  displayPasswordSerial: z.number().int().optional(),
  consoleClient: z.string().optional(),
  lastShutdown: z
    .object({
      guestInitiated: z.boolean(),
      reason: z.string(),
      time: z.string(),
      /** The runner was asked to stop (its pod deleted or evicted): the shutdown was not the guest's idea. */
      requested: z.boolean().optional(),
      /** qemu's own line about it: for a host signal, who sent it (`terminating on signal 15 from pid 42 (kill)`). */
      qemuSays: z.string().optional(),
    })
    .optional(),
  /** A VirtualMachineSnapshot's copy of the running VM's disks, as its runner reports it. */
  snapshotCopy: SnapshotCopyState.optional(),
  /** The last reset the runner carried out on request (a Reset operation), by the request's name. */
  lastReset: z.object({ request: z.string(), time: z.string() }).optional(),
  /** Spec changes the running VM has not taken yet: they apply when it restarts. */
  restartAwaitingChanges: z.array(RestartAwaitingChange).optional(),
  startFailure: StartFailure.optional(),
  /** The guest's OS as qemu-guest-agent tells it (guest-get-osinfo: id, name, pretty-name, version, kernel-release, …). */
  osinfo: z.record(z.string(), z.unknown()).meta({ 'x-kubernetes-preserve-unknown-fields': true }).optional(),
  /** The VM's address: its VirtualMachineIPAddress's, or (it has none) the first the guest agent reports. */
  ipAddress: z.string().optional(),
  /** The VirtualMachineIPAddress the VM has (named in the spec, or made by vmop). */
  virtualMachineIPAddressName: z.string().optional(),
  /** The guest's IP addresses (from qemu-guest-agent; no loopback or link-local ones). */
  ipAddresses: z.array(z.string()).optional(),
  /** How often the runner container of the current pod restarted (kubelet's restartCount). */
  runnerRestarts: z.number().int().optional(),
  /**
   * Which runner snapshot was folded in last (and from which pod), so an older one is never folded
   * over a newer one, and a missing one is told from a runner that went away.
   */
  runner: z.object({ runId: z.string(), seq: z.number().int(), podUid: z.string().optional() }).optional(),
  /**
   * The VM's runner pod: named here before vmop makes it (in a write guarded by the VM's
   * resourceVersion, so no two replicas make two), then with its uid.
   */
  runnerPod: z
    .object({
      name: z.string(),
      uid: z.string().optional(),
      /** The runner image the pod runs. */
      image: z.string().optional(),
      /**
       * True while it runs an older runner image than the manager's default (the VM names none):
       * vmop moves it live onto the new one (the chart's runner.update), or it updates at its next start.
       */
      outdated: z.boolean().optional(),
    })
    .optional(),
  migrationState: MigrationState.optional(),
  /** The VM's disks on claims (volumeClaimTemplate), in spec order. */
  disks: z.array(DiskStatus).optional(),
  /**
   * VM-Operator's pool assignment: the user of `pool` the VM is assigned to, and when they last used
   * it (assigned, or their console closed); released once the pool's retention has passed since then.
   */
  assignment: Assignment.optional(),
  /** Who the vmop agent in the guest says is logged in (spec.vm.display.loggedInUser). */
  loggedInUser: z.string().optional(),
});

export const ObjectMeta = z.object({
  name: z.string(),
  namespace: z.string().optional(),
  uid: z.string().optional(),
  generation: z.number().int().optional(),
  resourceVersion: z.string().optional(),
  labels: z.record(z.string(), z.string()).optional(),
  annotations: z.record(z.string(), z.string()).optional(),
  deletionTimestamp: z.union([z.string(), z.date()]).optional(),
  finalizers: z.array(z.string()).optional(),
});

export const VirtualMachine = z.object({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal(KIND),
  metadata: ObjectMeta,
  spec: VirtualMachineSpec,
  status: VirtualMachineStatus.optional(),
});

export type VirtualMachine = z.infer<typeof VirtualMachine>;
export type VirtualMachineSpec = z.infer<typeof VirtualMachineSpec>;
export type VmDefinition = z.infer<typeof VmDefinition>;
export type VirtualMachineStatus = z.infer<typeof VirtualMachineStatus>;
export type Disk = z.infer<typeof Disk>;
export type Condition = z.infer<typeof Condition>;
export type VmPhase = z.infer<typeof VmPhase>;
export type RunPolicy = z.infer<typeof RunPolicy>;
export type RestartAwaitingChange = z.infer<typeof RestartAwaitingChange>;
export type StartFailure = z.infer<typeof StartFailure>;
export type MigrationState = z.infer<typeof MigrationState>;
export type DiskStatus = z.infer<typeof DiskStatus>;
export type DiskAttachment = z.infer<typeof DiskAttachment>;
export type Assignment = z.infer<typeof Assignment>;
export type EvictionStrategy = z.infer<typeof EvictionStrategy>;
export type DiskSource = z.infer<typeof DiskSource>;
export type ImageSource = z.infer<typeof ImageSource>;
export type UploadSource = z.infer<typeof UploadSource>;
/** What an importer pod imports: a disk's source, or an image's (which may be an upload). */
export type ImportSource = DiskSource & { upload?: UploadSource };
