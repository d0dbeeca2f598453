// Generates vmop's CustomResourceDefinitions from the zod schemas.
import { z } from 'zod';
import {
  SCHEDULE_KIND,
  SCHEDULE_PLURAL,
  SCHEDULE_SHORT_NAME,
  SCHEDULE_SINGULAR,
  ScheduleSpec,
  ScheduleStatus,
} from './virtual-machine-snapshot-schedule.js';
import { stringify } from 'yaml';
import {
  OPERATION_KIND,
  OPERATION_PLURAL,
  OPERATION_SHORT_NAME,
  OPERATION_SINGULAR,
  OperationSpec,
  OperationStatus,
} from './virtual-machine-operation.js';
import {
  CLONE_KIND,
  CLONE_PLURAL,
  CLONE_SHORT_NAME,
  CLONE_SINGULAR,
  CloneSpec,
  CloneStatus,
} from './virtual-machine-clone.js';
import {
  EXPORT_KIND,
  EXPORT_PLURAL,
  EXPORT_SHORT_NAME,
  EXPORT_SINGULAR,
  ExportSpec,
  ExportStatus,
} from './virtual-machine-export.js';
import {
  RESTORE_KIND,
  RESTORE_PLURAL,
  RESTORE_SHORT_NAME,
  RESTORE_SINGULAR,
  RestoreSpec,
  RestoreStatus,
} from './virtual-machine-restore.js';
import {
  SNAPSHOT_KIND,
  SNAPSHOT_PLURAL,
  SNAPSHOT_SHORT_NAME,
  SNAPSHOT_SINGULAR,
  SnapshotSpec,
  SnapshotStatus,
} from './virtual-machine-snapshot.js';
import {
  IMAGE_KIND,
  IMAGE_PLURAL,
  IMAGE_SHORT_NAME,
  IMAGE_SINGULAR,
  ImageSpec,
  ImageStatus,
} from './virtual-machine-image.js';
import {
  IP_ADDRESS_KIND,
  IP_ADDRESS_PLURAL,
  IP_ADDRESS_SHORT_NAMES,
  IP_ADDRESS_SINGULAR,
  IpAddressSpec,
  IpAddressStatus,
  LEASE_KIND,
  LEASE_PLURAL,
  LEASE_SHORT_NAMES,
  LEASE_SINGULAR,
  LeaseSpec,
  LeaseStatus,
} from './virtual-machine-ip-address.js';
import { POOL_KIND, POOL_PLURAL, POOL_SINGULAR, PoolSpec } from './vm-pool.js';
import {
  CLASS_KIND,
  CLASS_PLURAL,
  CLASS_SHORT_NAMES,
  CLASS_SINGULAR,
  ClassSpec,
  ClassStatus,
  DEFAULT_CLASS_ANNOTATION,
} from './virtual-machine-class.js';
import {
  GROUP,
  KIND,
  MAX_VM_NAME_LENGTH,
  PLURAL,
  SINGULAR,
  VERSION,
  VirtualMachineSpec,
  VirtualMachineStatus,
} from './virtual-machine.js';

type JsonSchema = { [key: string]: unknown };

const SAFE_INTEGER_BOUNDS = new Set([Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER]);

/**
 * Turns zod's JSON Schema (draft 2020-12) into a Kubernetes structural schema:
 * drops keywords the apiserver rejects and rewrites unions it cannot express.
 */
export function toStructuralSchema(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(toStructuralSchema);
  if (!node || typeof node !== 'object') return node;
  const schema: JsonSchema = { ...(node as JsonSchema) };
  delete schema.$schema;
  delete schema.propertyNames;
  for (const bound of ['minimum', 'maximum'] as const) {
    if (typeof schema[bound] === 'number' && SAFE_INTEGER_BOUNDS.has(schema[bound])) delete schema[bound];
  }
  if (schema['x-kubernetes-int-or-string']) {
    schema.anyOf = [{ type: 'integer' }, { type: 'string' }];
    delete schema.type;
  }
  if (schema['x-kubernetes-preserve-unknown-fields']) delete schema.additionalProperties;
  const nullable = nullableBranch(schema.anyOf);
  if (nullable) {
    delete schema.anyOf;
    Object.assign(schema, nullable, { nullable: true });
  }
  if (Array.isArray(schema.type) && schema.type.includes('null')) {
    const [type, ...rest] = schema.type.filter((t) => t !== 'null');
    if (rest.length > 0)
      throw new Error(`cannot express a union of types ${schema.type.join(', ')} in a CRD`);
    Object.assign(schema, { type, nullable: true });
  }
  for (const [key, value] of Object.entries(schema)) {
    if (key === 'default' || key === 'x-kubernetes-validations' || key === 'enum') continue;
    if (key === 'properties' && value && typeof value === 'object') {
      schema.properties = Object.fromEntries(
        Object.entries(value as JsonSchema).map(([name, sub]) => [name, toStructuralSchema(sub)]),
      );
    } else if (value && typeof value === 'object') {
      schema[key] = toStructuralSchema(value);
    }
  }
  return schema;
}

/** `anyOf: [X, {type: null}]` (zod's nullable) becomes X with `nullable: true`. */
function nullableBranch(anyOf: unknown): JsonSchema | undefined {
  if (!Array.isArray(anyOf) || anyOf.length !== 2) return undefined;
  const nonNull = anyOf.filter((branch) => (branch as JsonSchema).type !== 'null');
  return nonNull.length === 1 ? (nonNull[0] as JsonSchema) : undefined;
}

function openApiSchema(schema: z.ZodType): unknown {
  return toStructuralSchema(z.toJSONSchema(schema, { io: 'input', unrepresentable: 'throw' }));
}

interface CrdDefinition {
  /** Default Namespaced. */
  scope?: 'Namespaced' | 'Cluster';
  plural: string;
  singular: string;
  kind: string;
  shortNames?: string[];
  description: string;
  printerColumns: Array<{ name: string; type: string; jsonPath: string; priority?: number }>;
  spec: z.ZodType;
  /** None: no status subresource (VM-Operator's VmPool has none). */
  status?: z.ZodType;
  rootValidations?: Array<{ rule: string; message: string }>;
}

function customResourceDefinition(definition: CrdDefinition) {
  const { plural, singular, kind, shortNames } = definition;
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${plural}.${GROUP}` },
    spec: {
      group: GROUP,
      scope: definition.scope ?? 'Namespaced',
      names: { plural, singular, kind, listKind: `${kind}List`, ...(shortNames && { shortNames }) },
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          ...(definition.status && { subresources: { status: {} } }),
          additionalPrinterColumns: definition.printerColumns,
          schema: {
            openAPIV3Schema: {
              type: 'object',
              description: definition.description,
              properties: {
                spec: openApiSchema(definition.spec),
                ...(definition.status && { status: openApiSchema(definition.status) }),
              },
              required: ['spec'],
              ...(definition.rootValidations && { 'x-kubernetes-validations': definition.rootValidations }),
            },
          },
        },
      ],
    },
  };
}

/** A `-o wide` column with the status of one of the VM's conditions. */
const conditionColumn = (name: string, type: string) => ({
  name,
  type: 'string',
  jsonPath: `.status.conditions[?(@.type=='${type}')].status`,
  priority: 1,
});

export function virtualMachineCrd() {
  return customResourceDefinition({
    plural: PLURAL,
    singular: SINGULAR,
    kind: KIND,
    description: 'A QEMU virtual machine run by vmop.',
    printerColumns: [
      // As the seed's (Deckhouse's) listing: PHASE CORES COREFRACTION MEMORY NEED RESTART AGENT
      // MIGRATABLE NODE IPADDRESS, with VM-Operator's state first and the -o wide ones between.
      { name: 'State', type: 'string', jsonPath: '.spec.vm.state' },
      { name: 'Phase', type: 'string', jsonPath: '.status.phase' },
      { name: 'CPUs', type: 'integer', jsonPath: '.status.cpus' },
      { name: 'Core fraction', type: 'string', jsonPath: '.status.coreFraction', priority: 1 },
      { name: 'RAM', type: 'string', jsonPath: '.status.ram' },
      { name: 'Class', type: 'string', jsonPath: '.status.virtualMachineClassName', priority: 1 },
      conditionColumn('Need restart', 'AwaitingRestartToApplyConfiguration'),
      conditionColumn('Agent', 'AgentConnected'),
      conditionColumn('Migratable', 'Migratable'),
      { name: 'Run policy', type: 'string', jsonPath: '.spec.runPolicy', priority: 1 },
      { name: 'Node', type: 'string', jsonPath: '.status.node' },
      { name: 'IPAddress', type: 'string', jsonPath: '.status.ipAddress' },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
    spec: VirtualMachineSpec,
    status: VirtualMachineStatus,
    rootValidations: [
      {
        rule: `size(self.metadata.name) <= ${MAX_VM_NAME_LENGTH}`,
        message: `the name must have at most ${MAX_VM_NAME_LENGTH} characters (the runner pod's labels are made from it)`,
      },
    ],
  });
}

export function virtualMachineOperationCrd() {
  return customResourceDefinition({
    plural: OPERATION_PLURAL,
    singular: OPERATION_SINGULAR,
    kind: OPERATION_KIND,
    shortNames: [OPERATION_SHORT_NAME],
    description: 'A request to start, stop, restart, reset or evict a VirtualMachine, and its outcome.',
    printerColumns: [
      { name: 'VM', type: 'string', jsonPath: '.spec.virtualMachineName' },
      { name: 'Type', type: 'string', jsonPath: '.spec.type' },
      { name: 'Phase', type: 'string', jsonPath: '.status.phase' },
      { name: 'Reason', type: 'string', jsonPath: '.status.reason', priority: 1 },
      { name: 'Message', type: 'string', jsonPath: '.status.message', priority: 1 },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
    spec: OperationSpec,
    status: OperationStatus,
  });
}

export function virtualMachineImageCrd() {
  return customResourceDefinition({
    plural: IMAGE_PLURAL,
    singular: IMAGE_SINGULAR,
    kind: IMAGE_KIND,
    shortNames: [IMAGE_SHORT_NAME],
    description:
      'A disk image imported once into a claim of its own; VM disks are filled from it (disks[].source.image).',
    printerColumns: [
      { name: 'Phase', type: 'string', jsonPath: '.status.phase' },
      { name: 'Progress', type: 'string', jsonPath: '.status.progress' },
      { name: 'Size', type: 'string', jsonPath: '.status.size' },
      { name: 'Message', type: 'string', jsonPath: '.status.message', priority: 1 },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
    spec: ImageSpec,
    status: ImageStatus,
  });
}

export function virtualMachineSnapshotCrd() {
  return customResourceDefinition({
    plural: SNAPSHOT_PLURAL,
    singular: SNAPSHOT_SINGULAR,
    kind: SNAPSHOT_KIND,
    shortNames: [SNAPSHOT_SHORT_NAME],
    description:
      "A VM's disks, runner data and spec as they were at one instant, copied into claims of the snapshot's own.",
    printerColumns: [
      { name: 'VM', type: 'string', jsonPath: '.spec.virtualMachineName' },
      { name: 'Phase', type: 'string', jsonPath: '.status.phase' },
      { name: 'Consistency', type: 'string', jsonPath: '.status.consistency' },
      { name: 'Size', type: 'string', jsonPath: '.status.size' },
      { name: 'Cut at', type: 'date', jsonPath: '.status.cutAt', priority: 1 },
      { name: 'Message', type: 'string', jsonPath: '.status.message', priority: 1 },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
    spec: SnapshotSpec,
    status: SnapshotStatus,
    rootValidations: [
      {
        rule: 'size(self.metadata.name) <= 52',
        message: "the name must have at most 52 characters (its copies' pods are named and labelled from it)",
      },
    ],
  });
}

export function virtualMachineRestoreCrd() {
  return customResourceDefinition({
    plural: RESTORE_PLURAL,
    singular: RESTORE_SINGULAR,
    kind: RESTORE_KIND,
    shortNames: [RESTORE_SHORT_NAME],
    description: "A VirtualMachineSnapshot's copies written back onto its VM's disks and runner data.",
    printerColumns: [
      { name: 'VM', type: 'string', jsonPath: '.spec.virtualMachineName' },
      { name: 'Snapshot', type: 'string', jsonPath: '.spec.virtualMachineSnapshotName' },
      { name: 'Phase', type: 'string', jsonPath: '.status.phase' },
      { name: 'Message', type: 'string', jsonPath: '.status.message', priority: 1 },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
    spec: RestoreSpec,
    status: RestoreStatus,
    rootValidations: [
      {
        rule: 'size(self.metadata.name) <= 52',
        message: 'the name must have at most 52 characters (its pods are named and labelled from it)',
      },
    ],
  });
}

export function virtualMachineCloneCrd() {
  return customResourceDefinition({
    plural: CLONE_PLURAL,
    singular: CLONE_SINGULAR,
    kind: CLONE_KIND,
    shortNames: [CLONE_SHORT_NAME],
    description: 'A new VirtualMachine made from a VirtualMachineSnapshot, with an identity of its own.',
    printerColumns: [
      { name: 'Snapshot', type: 'string', jsonPath: '.spec.virtualMachineSnapshotName' },
      { name: 'New VM', type: 'string', jsonPath: '.spec.newVirtualMachineName' },
      { name: 'Phase', type: 'string', jsonPath: '.status.phase' },
      { name: 'Message', type: 'string', jsonPath: '.status.message', priority: 1 },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
    spec: CloneSpec,
    status: CloneStatus,
  });
}

export function virtualMachineExportCrd() {
  return customResourceDefinition({
    plural: EXPORT_PLURAL,
    singular: EXPORT_SINGULAR,
    kind: EXPORT_KIND,
    shortNames: [EXPORT_SHORT_NAME],
    description:
      'The disks of a stopped VM or of a VirtualMachineSnapshot, served for download (qcow2 or raw) to whoever holds its token, until it expires.',
    printerColumns: [
      { name: 'VM', type: 'string', jsonPath: '.spec.source.virtualMachineName' },
      { name: 'Snapshot', type: 'string', jsonPath: '.spec.source.virtualMachineSnapshotName' },
      { name: 'Phase', type: 'string', jsonPath: '.status.phase' },
      { name: 'Expires', type: 'string', jsonPath: '.status.expiresAt' },
      { name: 'Message', type: 'string', jsonPath: '.status.message', priority: 1 },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
    spec: ExportSpec,
    status: ExportStatus,
    rootValidations: [
      {
        rule: 'size(self.metadata.name) <= 52',
        message: 'the name must have at most 52 characters (its pod and Service are named after it)',
      },
    ],
  });
}

export function virtualMachineSnapshotScheduleCrd() {
  return customResourceDefinition({
    plural: SCHEDULE_PLURAL,
    singular: SCHEDULE_SINGULAR,
    kind: SCHEDULE_KIND,
    shortNames: [SCHEDULE_SHORT_NAME],
    description:
      'VirtualMachineSnapshots of the VMs a selector picks, taken on a cron schedule, the last few kept.',
    printerColumns: [
      { name: 'Schedule', type: 'string', jsonPath: '.spec.schedule' },
      { name: 'Keep', type: 'integer', jsonPath: '.spec.keep' },
      { name: 'Suspend', type: 'boolean', jsonPath: '.spec.suspend' },
      { name: 'Last', type: 'date', jsonPath: '.status.lastScheduleTime' },
      { name: 'Next', type: 'string', jsonPath: '.status.nextScheduleTime' },
      { name: 'Failures', type: 'integer', jsonPath: '.status.consecutiveFailures' },
      { name: 'Message', type: 'string', jsonPath: '.status.message', priority: 1 },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
    spec: ScheduleSpec,
    status: ScheduleStatus,
    rootValidations: [
      {
        rule: 'size(self.metadata.name) <= 63',
        message: 'the name must have at most 63 characters (its snapshots are labelled with it)',
      },
    ],
  });
}

export function vmPoolCrd() {
  return customResourceDefinition({
    plural: POOL_PLURAL,
    singular: POOL_SINGULAR,
    kind: POOL_KIND,
    description:
      "VM-Operator's pool of VMs (those naming it in spec.pools), assigned to its users on request.",
    printerColumns: [
      { name: 'Retention', type: 'string', jsonPath: '.spec.retention' },
      { name: 'Login', type: 'boolean', jsonPath: '.spec.loginOnAssignment' },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
    spec: PoolSpec,
  });
}

export function virtualMachineClassCrd() {
  return customResourceDefinition({
    scope: 'Cluster',
    plural: CLASS_PLURAL,
    singular: CLASS_SINGULAR,
    kind: CLASS_KIND,
    shortNames: CLASS_SHORT_NAMES,
    description:
      'What a VM of the class may be (CPU model, sizes, core fractions) and where it runs; VMs name it in spec.vm.virtualMachineClassName.',
    printerColumns: [
      { name: 'CPU', type: 'string', jsonPath: '.spec.cpu.type' },
      { name: 'Model', type: 'string', jsonPath: '.spec.cpu.model' },
      {
        name: 'Default',
        type: 'string',
        jsonPath: `.metadata.annotations.${DEFAULT_CLASS_ANNOTATION.replace(/[./]/g, (c) => `\\${c}`)}`,
      },
      { name: 'VMs', type: 'integer', jsonPath: '.status.usedByCount' },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
    spec: ClassSpec,
    status: ClassStatus,
  });
}

export function virtualMachineIpAddressCrd() {
  return customResourceDefinition({
    plural: IP_ADDRESS_PLURAL,
    singular: IP_ADDRESS_SINGULAR,
    kind: IP_ADDRESS_KIND,
    shortNames: IP_ADDRESS_SHORT_NAMES,
    description:
      "A VM's own IP address: any free one of the VM subnets (Auto) or a named one (Static), leased by a VirtualMachineIPAddressLease; VMs name it in spec.vm.virtualMachineIPAddressName.",
    printerColumns: [
      { name: 'Address', type: 'string', jsonPath: '.status.address' },
      { name: 'Status', type: 'string', jsonPath: '.status.phase' },
      { name: 'VM', type: 'string', jsonPath: '.status.virtualMachineName' },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
    spec: IpAddressSpec,
    status: IpAddressStatus,
  });
}

export function virtualMachineIpAddressLeaseCrd() {
  return customResourceDefinition({
    scope: 'Cluster',
    plural: LEASE_PLURAL,
    singular: LEASE_SINGULAR,
    kind: LEASE_KIND,
    shortNames: LEASE_SHORT_NAMES,
    description:
      'The lease of one VM address (named ip-a-b-c-d after it), held by a VirtualMachineIPAddress; released, it stays with its namespace for a while.',
    printerColumns: [
      { name: 'VirtualMachineIPAddress', type: 'string', jsonPath: '.spec.virtualMachineIPAddressRef' },
      { name: 'Status', type: 'string', jsonPath: '.status.phase' },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
    spec: LeaseSpec,
    status: LeaseStatus,
  });
}

/** vmop's CRDs, with the file each is generated into (in crds/ and in the Helm chart). */
export const CRDS = [
  { file: `${PLURAL}.${GROUP}.yaml`, source: 'src/api/virtual-machine.ts', crd: virtualMachineCrd },
  {
    file: `${OPERATION_PLURAL}.${GROUP}.yaml`,
    source: 'src/api/virtual-machine-operation.ts',
    crd: virtualMachineOperationCrd,
  },
  {
    file: `${IMAGE_PLURAL}.${GROUP}.yaml`,
    source: 'src/api/virtual-machine-image.ts',
    crd: virtualMachineImageCrd,
  },
  {
    file: `${SNAPSHOT_PLURAL}.${GROUP}.yaml`,
    source: 'src/api/virtual-machine-snapshot.ts',
    crd: virtualMachineSnapshotCrd,
  },
  {
    file: `${RESTORE_PLURAL}.${GROUP}.yaml`,
    source: 'src/api/virtual-machine-restore.ts',
    crd: virtualMachineRestoreCrd,
  },
  {
    file: `${EXPORT_PLURAL}.${GROUP}.yaml`,
    source: 'src/api/virtual-machine-export.ts',
    crd: virtualMachineExportCrd,
  },
  {
    file: `${CLONE_PLURAL}.${GROUP}.yaml`,
    source: 'src/api/virtual-machine-clone.ts',
    crd: virtualMachineCloneCrd,
  },
  {
    file: `${SCHEDULE_PLURAL}.${GROUP}.yaml`,
    source: 'src/api/virtual-machine-snapshot-schedule.ts',
    crd: virtualMachineSnapshotScheduleCrd,
  },
  { file: `${POOL_PLURAL}.${GROUP}.yaml`, source: 'src/api/vm-pool.ts', crd: vmPoolCrd },
  {
    file: `${CLASS_PLURAL}.${GROUP}.yaml`,
    source: 'src/api/virtual-machine-class.ts',
    crd: virtualMachineClassCrd,
  },
  {
    file: `${IP_ADDRESS_PLURAL}.${GROUP}.yaml`,
    source: 'src/api/virtual-machine-ip-address.ts',
    crd: virtualMachineIpAddressCrd,
  },
  {
    file: `${LEASE_PLURAL}.${GROUP}.yaml`,
    source: 'src/api/virtual-machine-ip-address.ts',
    crd: virtualMachineIpAddressLeaseCrd,
  },
];

export function renderCrdYaml(definition: (typeof CRDS)[number]): string {
  return (
    `# Generated from ${definition.source} by \`npm run gen:crds\`. Do not edit.\n` +
    stringify(definition.crd(), { lineWidth: 0 })
  );
}

export const CRD_DIR = 'crds';
/** The Helm chart's copies (a chart cannot read files outside its directory). */
export const CHART_CRD_DIR = 'helm/vmop/files';
