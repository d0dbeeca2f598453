// The VirtualMachineExport custom resource (short name vmexport): the disks of a stopped VM or of
// a Ready snapshot, served for download (sparse qcow2, or raw) by a pod of the export's own to
// whoever holds its token, until the export expires. KubeVirt's VirtualMachineExport is the
// anchor: a server pod, a Service, a token Secret, a time to live.
import { z } from 'zod';
import { Condition, GROUP, ObjectMeta, VERSION } from './virtual-machine.js';

export const EXPORT_KIND = 'VirtualMachineExport';
export const EXPORT_PLURAL = 'virtualmachineexports';
export const EXPORT_SINGULAR = 'virtualmachineexport';
export const EXPORT_SHORT_NAME = 'vmexport';

/** The formats a disk is served in: `/disks/<disk>.qcow2` and `/disks/<disk>.raw`. */
export const ExportFormat = z.enum(['qcow2', 'raw']);
export type ExportFormat = z.infer<typeof ExportFormat>;

/** A time to live as Go and KubeVirt write it: `90m`, `2h`, `1h30m`, `45s` (RE2: the apiserver's). */
const DURATION = /^([0-9]+h)?([0-9]+m)?([0-9]+s)?$/;

export const ExportSpec = z
  .object({
    source: z
      .object({
        virtualMachineName: z
          .string()
          .min(1)
          .max(253)
          .optional()
          .describe('A VM (in the same namespace) whose disks are served while it is stopped.'),
        virtualMachineSnapshotName: z
          .string()
          .min(1)
          .max(253)
          .optional()
          .describe("A snapshot (in the same namespace) whose copies of its VM's disks are served."),
      })
      .meta({
        'x-kubernetes-validations': [
          {
            rule: 'has(self.virtualMachineName) != has(self.virtualMachineSnapshotName)',
            message: 'a source is exactly one of virtualMachineName or virtualMachineSnapshotName',
          },
        ],
      })
      .describe('What is exported: a stopped VM, or a snapshot of one.'),
    disks: z
      .array(z.string().min(1).max(63))
      .max(64)
      .optional()
      .describe("The disks to serve, by name (a disk's volumeClaimTemplate name); all of them when absent."),
    ttl: z
      .string()
      .min(2)
      .max(16)
      .regex(DURATION, 'a duration such as 90m, 2h or 1h30m')
      .default('2h')
      .describe(
        'How long after its creation the export serves (its pod and Service then go); 2h when absent.',
      ),
  })
  .meta({
    'x-kubernetes-validations': [{ rule: 'self == oldSelf', message: 'the spec of an export is immutable' }],
  });

export const ExportPhase = z.enum(['Pending', 'Ready', 'Expired', 'Failed']);

export const ExportDisk = z.object({
  /** The disk's name (its volumeClaimTemplate's). */
  name: z.string(),
  /** The claim served (the VM's, or the snapshot's copy). */
  claimName: z.string(),
  size: z.string().optional(),
  /**
   * Where pods in the cluster download it over HTTPS (the token in header x-vmop-export-token or
   * ?token=; the server's certificate in the export's status.certificate).
   */
  urls: z.record(ExportFormat, z.string()).optional(),
});

export const ExportStatus = z.object({
  phase: ExportPhase.optional(),
  disks: z.array(ExportDisk).optional(),
  /** The Secret whose `token` opens the downloads. */
  tokenSecretName: z.string().optional(),
  /** The Service in front of the export's pod. */
  serviceName: z.string().optional(),
  /** The export server's TLS certificate (PEM, self-signed): what a download trusts. */
  certificate: z.string().optional(),
  expiresAt: z.string().optional(),
  message: z.string().optional(),
  observedGeneration: z.number().int().optional(),
  conditions: z.array(Condition).optional(),
});

export const VirtualMachineExport = z.object({
  apiVersion: z.literal(`${GROUP}/${VERSION}`),
  kind: z.literal(EXPORT_KIND),
  metadata: ObjectMeta.extend({ creationTimestamp: z.union([z.string(), z.date()]).optional() }),
  spec: ExportSpec,
  status: ExportStatus.optional(),
});

export type VirtualMachineExport = z.infer<typeof VirtualMachineExport>;
export type ExportStatus = z.infer<typeof ExportStatus>;
export type ExportDisk = z.infer<typeof ExportDisk>;

/** The milliseconds a `ttl` spans. */
export function ttlMs(ttl: string): number {
  const match = DURATION.exec(ttl);
  if (!match) throw new Error(`not a duration: ${ttl}`);
  const [hours, minutes, seconds] = match.slice(1).map((part) => (part ? parseInt(part, 10) : 0));
  return ((hours! * 60 + minutes!) * 60 + seconds!) * 1000;
}

/** The HTTPS port of an export's pod and Service. */
export const EXPORT_PORT = 8443;
/** The header (or `token` query parameter) that carries an export's token. */
export const EXPORT_TOKEN_HEADER = 'x-vmop-export-token';
export const exportTokenSecretName = (exportName: string) => `${exportName}-token`;
/** The export's pod and its Service share the name. */
export const exportServerName = (exportName: string) => `${exportName}-export`;
/** The names the export server's certificate holds: its Service's, the short one first. */
export const exportServerHostnames = (exportName: string, namespace: string) => {
  const service = `${exportServerName(exportName)}.${namespace}.svc`;
  return [service, `${service}.cluster.local`];
};
/** A disk's path on the export server. */
export const exportDiskPath = (disk: string, format: ExportFormat) => `/disks/${disk}.${format}`;

/** The work-queue key of an export. */
export const exportKey = (namespace: string, name: string) => `vmexport:${namespace}/${name}`;
export function parseExportKey(key: string): { namespace: string; name: string } {
  const match = /^vmexport:([^/]+)\/(.+)$/.exec(key);
  if (!match) throw new Error(`not a VirtualMachineExport key: ${key}`);
  return { namespace: match[1]!, name: match[2]! };
}

/** Phases after which an export serves no more. */
export const isExportDone = (vmExport: { status?: { phase?: string } }) =>
  vmExport.status?.phase === 'Expired' || vmExport.status?.phase === 'Failed';
