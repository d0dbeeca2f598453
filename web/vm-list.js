// Which VMs a list shows and in what order: the person's search, the namespace, phase and node
// they picked, and the column they sorted by. Pure (no DOM), shared by the admin table.

/** A VM's key in lists and maps: "namespace/name". */
export const keyOf = (vm) => `${vm.namespace}/${vm.name}`;

/** The columns a list can be sorted by, each with the value it compares. */
const SORT_KEYS = {
  name: keyOf,
  namespace: (vm) => vm.namespace,
  phase: (vm) => vm.phase,
  cpus: (vm) => vm.cpus,
  ram: (vm) => vm.ramBytes,
  node: (vm) => vm.node ?? '',
};

/** The choices a picker offers: the namespaces, phases and nodes the VMs have, sorted. */
export function choicesOf(vms) {
  const sorted = (values) => [...new Set(values.filter((v) => v))].sort((a, b) => a.localeCompare(b));
  return {
    namespaces: sorted(vms.map((vm) => vm.namespace)),
    phases: sorted(vms.map((vm) => vm.phase)),
    nodes: sorted(vms.map((vm) => vm.node)),
  };
}

const compare = (a, b) =>
  typeof a === 'number' && typeof b === 'number' ? a - b : String(a).localeCompare(String(b));

/**
 * The VMs to show. `text` matches "namespace/name" (and the address) in any case; an empty
 * namespace, phase or node picks all; ties keep the name's order, so a sort is stable as VMs change.
 */
export function selectVms(
  vms,
  { text = '', namespace = '', phase = '', node = '', sortBy = 'name', descending = false } = {},
) {
  const wanted = text.trim().toLowerCase();
  const key = SORT_KEYS[sortBy] ?? SORT_KEYS.name;
  return vms
    .filter(
      (vm) =>
        (!wanted || `${keyOf(vm)} ${vm.ipAddress ?? ''}`.toLowerCase().includes(wanted)) &&
        (!namespace || vm.namespace === namespace) &&
        (!phase || vm.phase === phase) &&
        (!node || vm.node === node),
    )
    .sort((a, b) => (descending ? -1 : 1) * compare(key(a), key(b)) || compare(keyOf(a), keyOf(b)));
}
