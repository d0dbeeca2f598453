// Zod schemas of the Kubernetes types a VirtualMachine embeds (placement, resources, PVC templates).
// They mirror the core/v1 OpenAPI shapes, so the generated CRD stays structural without
// x-kubernetes-preserve-unknown-fields.
import { z } from 'zod';

const QUANTITY_PATTERN =
  '^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$';

/** A Kubernetes resource.Quantity: an integer or a string like "4Gi", "1G", "0.5". */
export const Quantity = z
  .union([z.number().int().nonnegative(), z.string().regex(new RegExp(QUANTITY_PATTERN)).max(64)])
  .meta({ 'x-kubernetes-int-or-string': true, pattern: QUANTITY_PATTERN });

export const StringMap = z.record(z.string(), z.string());

export const ResourceRequirements = z.object({
  limits: z.record(z.string(), Quantity).optional(),
  requests: z.record(z.string(), Quantity).optional(),
});

export const LabelSelectorRequirement = z.object({
  key: z.string(),
  operator: z.string(),
  values: z.array(z.string()).optional(),
});

export const LabelSelector = z.object({
  matchExpressions: z.array(LabelSelectorRequirement).optional(),
  matchLabels: StringMap.optional(),
});

const NodeSelectorTerm = z.object({
  matchExpressions: z.array(LabelSelectorRequirement).optional(),
  matchFields: z.array(LabelSelectorRequirement).optional(),
});

const PodAffinityTerm = z.object({
  labelSelector: LabelSelector.optional(),
  namespaceSelector: LabelSelector.optional(),
  namespaces: z.array(z.string()).optional(),
  topologyKey: z.string(),
  matchLabelKeys: z.array(z.string()).optional(),
  mismatchLabelKeys: z.array(z.string()).optional(),
});

const WeightedPodAffinityTerm = z.object({
  weight: z.number().int(),
  podAffinityTerm: PodAffinityTerm,
});

const PodAffinity = z.object({
  requiredDuringSchedulingIgnoredDuringExecution: z.array(PodAffinityTerm).optional(),
  preferredDuringSchedulingIgnoredDuringExecution: z.array(WeightedPodAffinityTerm).optional(),
});

export const Affinity = z.object({
  nodeAffinity: z
    .object({
      requiredDuringSchedulingIgnoredDuringExecution: z
        .object({ nodeSelectorTerms: z.array(NodeSelectorTerm) })
        .optional(),
      preferredDuringSchedulingIgnoredDuringExecution: z
        .array(z.object({ weight: z.number().int(), preference: NodeSelectorTerm }))
        .optional(),
    })
    .optional(),
  podAffinity: PodAffinity.optional(),
  podAntiAffinity: PodAffinity.optional(),
});

export const Toleration = z.object({
  key: z.string().optional(),
  operator: z.string().optional(),
  value: z.string().optional(),
  effect: z.string().optional(),
  tolerationSeconds: z.number().int().optional(),
});

const TypedObjectReference = z.object({
  apiGroup: z.string().optional(),
  kind: z.string(),
  name: z.string(),
  namespace: z.string().optional(),
});

/** A VM disk's PVC spec; the defaults are VM-Operator's, stored in the object as its CRD does. */
export const PersistentVolumeClaimSpec = z.object({
  accessModes: z.array(z.string()).default(['ReadWriteOnce']),
  dataSource: TypedObjectReference.optional(),
  dataSourceRef: TypedObjectReference.optional(),
  resources: ResourceRequirements.optional(),
  selector: LabelSelector.optional(),
  storageClassName: z.string().optional(),
  volumeAttributesClassName: z.string().optional(),
  volumeMode: z.enum(['Block', 'Filesystem']).default('Block'),
  volumeName: z.string().optional(),
});

/** The part of ObjectMeta that an embedded template (like a volumeClaimTemplate) may carry. */
export const EmbeddedObjectMeta = z.object({
  name: z.string().max(200).optional(),
  labels: StringMap.optional(),
  annotations: StringMap.optional(),
});

/** A NetworkPolicy peer (networking.k8s.io/v1 NetworkPolicyPeer): pods by namespace and labels, or addresses. */
export const NetworkPolicyPeer = z
  .object({
    podSelector: LabelSelector.optional(),
    namespaceSelector: LabelSelector.optional(),
    ipBlock: z.object({ cidr: z.string().min(1), except: z.array(z.string().min(1)).optional() }).optional(),
  })
  .refine((peer) => peer.ipBlock === undefined || (!peer.podSelector && !peer.namespaceSelector), {
    message: 'an ipBlock peer has no pod or namespace selector',
  })
  .refine((peer) => peer.ipBlock || peer.podSelector || peer.namespaceSelector, {
    message: 'a peer names pods, namespaces or an ipBlock',
  });
export type NetworkPolicyPeer = z.infer<typeof NetworkPolicyPeer>;
