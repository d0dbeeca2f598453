// Which VMs a list shows and in what order: the person's search, the namespace, phase and node
// they picked, and the column they sorted by. Pure (no DOM), shared by the admin table.

/** Binary and decimal suffixes of a Kubernetes quantity, as RAM is written ("2Gi", "512M"). */
const UNITS = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, k: 1e3, M: 1e6, G: 1e9, T: 1e12 };

/** A quantity in bytes, for sorting; 0 for what is no quantity. */
export function bytesOf(quantity) {
  const match = /^([0-9.]+)([A-Za-z]*)$/.exec(String(quantity ?? '').trim());
  if (!match) return 0;
  const unit = match[2] === '' ? 1 : UNITS[match[2]];
  return unit === undefined ? 0 : Number(match[1]) * unit;
}

/** The columns a list can be sorted by, each with the value it compares. */
export const SORT_KEYS = {
  name: (vm) => `${vm.namespace}/${vm.name}`,
  namespace: (vm) => vm.namespace,
  phase: (vm) => vm.phase,
  cpus: (vm) => vm.cpus,
  ram: (vm) => bytesOf(vm.ram),
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
  const byName = SORT_KEYS.name;
  return vms
    .filter(
      (vm) =>
        (!wanted || `${vm.namespace}/${vm.name} ${vm.ipAddress ?? ''}`.toLowerCase().includes(wanted)) &&
        (!namespace || vm.namespace === namespace) &&
        (!phase || vm.phase === phase) &&
        (!node || vm.node === node),
    )
    .sort((a, b) => (descending ? -1 : 1) * compare(key(a), key(b)) || compare(byName(a), byName(b)));
}
