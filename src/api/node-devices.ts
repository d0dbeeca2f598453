// The extended resources vmop's node agent (src/node-agent) gives pods, and runner pods ask for.

/** Where kubelet and device plugins meet (fixed: kubelet's --root-dir does not move it). */
export const DEVICE_PLUGIN_DIR = '/var/lib/kubelet/device-plugins';

/** /dev/kvm, shared by the runner pods of a node (as KubeVirt's devices.kubevirt.io/kvm). */
export const KVM_DEVICE = 'devices.vmop.jdrupes.org/kvm';
