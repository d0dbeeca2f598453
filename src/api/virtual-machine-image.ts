// The VirtualMachineImage custom resource: a disk image imported once into a claim of its own
// (as Deckhouse's VirtualImage), which VM disks are then filled from (`disks[].source.image`)
// without going to the network again. Its spec is immutable: another image is another object.
import { z } from 'zod';
import { Quantity } from './kubernetes-types.js';
import { Condition, GROUP, ImageSource, ObjectMeta, VERSION } from './virtual-machine.js';

export const IMAGE_KIND = 'VirtualMachineImage';
export const IMAGE_PLURAL = 'virtualmachineimages';
export const IMAGE_SINGULAR = 'virtualmachineimage';
export const IMAGE_SHORT_NAME = 'vmimage';

export const ImageSpec = z
  .object({
    source: ImageSource.describe('Where the image comes from; imported when the image is made.'),
    storage: z
      .object({
        size: Quantity.describe('The size of the claim the image is imported into (at least the image).'),
        storageClassName: z
          .string()
          .max(253)
          .optional()
          .describe('Of the claim; the default StorageClass when absent.'),
      })
      .describe("The image's own claim (Block, ReadWriteOnce)."),
  })
  .meta({
    'x-kubernetes-validations': [{ rule: 'self == oldSelf', message: 'the spec of an image is immutable' }],
  });

export const ImagePhase = z.enum(['Pending', 'Importing', 'Ready', 'Failed']);

export const ImageStatus = z.object({
  /** Pending: its claim is being made; Importing; Ready: disks can be filled from it; Failed: see message. */
  phase: ImagePhase.optional(),
  /** The claim that holds the image. */
  claim: z.string().optional(),
  /** What the claim holds (its capacity), once Ready. */
  size: z.string().optional(),
  /** While importing: how far, e.g. "42%". */
  progress: z.string().optional(),
  importedBytes: z.number().int().optional(),
  /** An upload's server, while it waits for bytes: the certificate it shows (PEM). */
  upload: z.object({ certificate: z.string() }).optional(),
  message: z.string().optional(),
  observedGeneration: z.number().int().optional(),
  conditions: z.array(Condition).optional(),
});

export const VirtualMachineImage = z.object({
  apiVersion: z.literal(`${GROUP}/${VERSION}`),
  kind: z.literal(IMAGE_KIND),
  metadata: ObjectMeta,
  spec: ImageSpec,
  status: ImageStatus.optional(),
});

export type VirtualMachineImage = z.infer<typeof VirtualMachineImage>;
export type ImageStatus = z.infer<typeof ImageStatus>;

/** The work-queue key of an image. */
export const imageKey = (namespace: string, name: string) => `image:${namespace}/${name}`;
export function parseImageKey(key: string): { namespace: string; name: string } {
  const match = /^image:([^/]+)\/(.+)$/.exec(key);
  if (!match) throw new Error(`not a VirtualMachineImage key: ${key}`);
  return { namespace: match[1]!, name: match[2]! };
}
/** The claim an image is imported into. */
export const imageClaimName = (name: string) => `${name}-image`;
/** The pod that imports it (and, for an upload, receives it). */
export const imageImporterPodName = (name: string) => `${name}-image-import`;
/** An upload's token and its server's certificate and key. */
export const imageUploadSecretName = (name: string) => `${name}-upload`;
/** Where the importer pod of an upload listens (HTTPS). */
export const UPLOAD_PORT = 8443;
/** The name the upload server's certificate holds (a client sets it as the TLS server name). */
export const uploadServerHostname = (name: string, namespace: string) =>
  `${imageImporterPodName(name)}.${namespace}.pod`;
