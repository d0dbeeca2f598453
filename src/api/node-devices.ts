// The extended resources vmop's node agent (src/node-agent) gives pods, and runner pods ask for.

/** /dev/kvm, shared by the runner pods of a node (as KubeVirt's devices.kubevirt.io/kvm). */
export const KVM_DEVICE = 'devices.vmop.jdrupes.org/kvm';
