// The GUI's "New VM" form (pure): what a person fills in, the VirtualMachine it becomes, and the
// apiserver's refusal of it told at the field it concerns. The form covers what most VMs need (one
// system disk filled from an image or a URL, a NIC on the pod network); anything else is the VM's
// YAML, editable on its page once it exists.
import { z } from 'zod';
import { Quantity } from '../api/kubernetes-types.js';
import type { RefusalStatus } from '../kube/clients.js';
import { API_VERSION, KIND, MAX_VM_NAME_LENGTH, VirtualMachine } from '../api/virtual-machine.js';

/** A VirtualMachine as written (its defaults not yet filled in). */
type VirtualMachineManifest = z.input<typeof VirtualMachine>;

/** A DNS-1123 label: what Kubernetes allows as a VM's name (its pod is named after it). */
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

export const NewVmForm = z
  .object({
    namespace: z.string().min(1, 'choose a namespace').max(63),
    name: z
      .string()
      .min(1, 'give the VM a name')
      .max(
        MAX_VM_NAME_LENGTH,
        `at most ${MAX_VM_NAME_LENGTH} characters (the runner pod's labels are made from it)`,
      )
      .regex(DNS_LABEL, 'lower-case letters, digits and dashes, starting and ending with a letter or digit'),
    cpus: z.number().int('a whole number').min(1, 'at least 1').max(64, 'at most 64'),
    ram: Quantity,
    firmware: z.enum(['uefi', 'bios']),
    diskSize: Quantity,
    source: z.discriminatedUnion('kind', [
      z.object({ kind: z.literal('empty') }),
      z.object({ kind: z.literal('image'), image: z.string().min(1, 'choose an image').max(253) }),
      z.object({
        kind: z.literal('url'),
        url: z.url({ protocol: /^https?$/, error: 'an http:// or https:// URL' }),
      }),
    ]),
    start: z.boolean(),
  })
  .strict();
export type NewVmForm = z.infer<typeof NewVmForm>;

/** The form's fields, each with what went wrong there; `form` for what concerns no one field. */
export type FieldErrors = Partial<Record<keyof NewVmForm | 'form', string>>;

/** zod's complaints about a submitted form, by field. */
export function formErrors(error: z.ZodError): FieldErrors {
  const errors: FieldErrors = {};
  for (const issue of error.issues) {
    const field = (issue.path[0] as keyof NewVmForm | undefined) ?? 'form';
    errors[field in NewVmForm.shape ? field : 'form'] ??= issue.message;
  }
  return errors;
}

export const SYSTEM_DISK = 'system';

/** The VirtualMachine the form asks for, annotated with who asked. */
export function vmOfForm(form: NewVmForm, annotations: Record<string, string>): VirtualMachineManifest {
  const source =
    form.source.kind === 'image'
      ? { image: { name: form.source.image } }
      : form.source.kind === 'url'
        ? { http: { url: form.source.url } }
        : undefined;
  return {
    apiVersion: API_VERSION,
    kind: KIND,
    metadata: { name: form.name, namespace: form.namespace, annotations },
    spec: {
      vm: {
        state: form.start ? 'Running' : 'Stopped',
        maximumCpus: form.cpus,
        currentCpus: form.cpus,
        maximumRam: form.ram,
        currentRam: form.ram,
        firmware: form.firmware,
        networks: [{ user: {} }],
        disks: [
          {
            volumeClaimTemplate: {
              metadata: { name: SYSTEM_DISK },
              spec: { resources: { requests: { storage: form.diskSize } } },
            },
            bootindex: 0,
            ...(source && { source }),
          },
        ],
      },
    },
  };
}

/** Which form field a path of the VirtualMachine (as the apiserver names it) came from. */
const FIELD_OF_PATH: Array<[RegExp, keyof NewVmForm]> = [
  [/^metadata\.name\b/, 'name'],
  [/^metadata\.namespace\b/, 'namespace'],
  [/^spec\.vm\.(maximum|current)Cpus\b/, 'cpus'],
  [/^spec\.vm\.(maximum|current)Ram\b/, 'ram'],
  [/^spec\.vm\.firmware\b/, 'firmware'],
  [/^spec\.vm\.disks\[0\]\.source\b/, 'source'],
  [/^spec\.vm\.disks\[0\]\.volumeClaimTemplate\b/, 'diskSize'],
];

/**
 * The apiserver's refusal (a Status) told by field: each cause at the field its path names (the
 * schema's and the CEL rules' causes name one), the rest, and an existing name, where they belong.
 */
export function rejectionErrors(status: RefusalStatus): FieldErrors {
  const errors: FieldErrors = {};
  if (status.reason === 'AlreadyExists') return { name: 'a VM of this name exists in this namespace' };
  for (const cause of status.details?.causes ?? []) {
    const field = FIELD_OF_PATH.find(([path]) => path.test(cause.field ?? ''))?.[1] ?? 'form';
    const message = cause.message ?? 'refused';
    errors[field] = errors[field] ? `${errors[field]}; ${message}` : message;
  }
  if (Object.keys(errors).length === 0) errors.form = status.message ?? 'the apiserver refused the VM';
  return errors;
}
