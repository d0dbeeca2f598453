// How the disk helper pods (the importer, which parses downloads it cannot trust, and the attach
// pod's qemu-nbd) are confined: Pod Security "restricted". They run as a user of no account; the
// claim's block device becomes theirs through the container runtime's
// device_ownership_from_security_context (containerd, CRI-O), which docs/installing.md asks for.
import type { V1PodSecurityContext, V1SecurityContext } from '@kubernetes/client-node';

/** The distroless "nonroot" user and group. */
export const HELPER_USER = 65532;

export const HELPER_POD_SECURITY: V1PodSecurityContext = {
  runAsNonRoot: true,
  runAsUser: HELPER_USER,
  runAsGroup: HELPER_USER,
  // Scratch space (emptyDir) and Secret volumes are readable and writable through the group.
  fsGroup: HELPER_USER,
  seccompProfile: { type: 'RuntimeDefault' },
};

export const HELPER_CONTAINER_SECURITY: V1SecurityContext = {
  allowPrivilegeEscalation: false,
  readOnlyRootFilesystem: true,
  capabilities: { drop: ['ALL'] },
};
