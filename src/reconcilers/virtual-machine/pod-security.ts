// How the pods vmop makes for VMs are confined: Pod Security "restricted". The runner (QEMU with
// the guest), the importer (which parses downloads it cannot trust) and the attach pod's qemu-nbd
// run as a user of no account; a claim's block device becomes theirs through the container
// runtime's device_ownership_from_security_context (containerd, CRI-O), which docs/installing.md
// asks for. Only a runner whose VM has a host-bridge tap network in a namespace an admin allows
// runs privileged on the host network (runner-pod/pod.ts).
import type { V1PodSecurityContext, V1SecurityContext } from '@kubernetes/client-node';

/** The distroless "nonroot" user and group. */
export const NONROOT_USER = 65532;

export const RESTRICTED_POD_SECURITY: V1PodSecurityContext = {
  runAsNonRoot: true,
  runAsUser: NONROOT_USER,
  runAsGroup: NONROOT_USER,
  // Volumes (the runner's data claim, emptyDirs, Secrets) are readable and writable through the group.
  fsGroup: NONROOT_USER,
  // Only when the volume's root is not already the group's: a large data claim is not walked each start.
  fsGroupChangePolicy: 'OnRootMismatch',
  seccompProfile: { type: 'RuntimeDefault' },
};

export const RESTRICTED_CONTAINER_SECURITY: V1SecurityContext = {
  allowPrivilegeEscalation: false,
  readOnlyRootFilesystem: true,
  capabilities: { drop: ['ALL'] },
};

/** A namespace's labels that make the apiserver hold its pods to "restricted" (as the test beds' are). */
export const RESTRICTED_NAMESPACE_LABELS = { 'pod-security.kubernetes.io/enforce': 'restricted' };
