// Which VM an address is attached to (pure): the VMs of its namespace that name it — in
// spec.vm.virtualMachineIPAddressName, or as the address vmop made for them — one at a time: the one
// it is attached to stays; else the oldest.
import { createHash } from 'node:crypto';

/** What of a VM (cached, or parsed) tells its address claim. */
interface VmView {
  metadata?: { name?: string; uid?: string; deletionTimestamp?: unknown; creationTimestamp?: unknown };
  spec?: { vm?: { virtualMachineIPAddressName?: string } };
}

/** The VirtualMachineIPAddress vmop makes for a VM that names none: `<vm>-<hash of its uid>`, as Deckhouse's. */
export function autoIpAddressName(vmName: string, vmUid: string): string {
  const hash = createHash('sha256').update(vmUid).digest('hex').slice(0, 5);
  return `${vmName.slice(0, 247)}-${hash}`;
}

/** The VirtualMachineIPAddress a VM has: the one it names, or the one vmop makes for it. */
export function ipAddressNameOf(vm: VmView): string | undefined {
  const named = vm.spec?.vm?.virtualMachineIPAddressName;
  if (named) return named;
  const { name, uid } = vm.metadata ?? {};
  return name && uid ? autoIpAddressName(name, uid) : undefined;
}

/** The VM (of `vms`, one namespace) the address `name` is attached to; `current`: the one it is. */
export function attachedVm(
  name: string,
  vms: readonly VmView[],
  current: string | undefined,
): string | undefined {
  const candidates = vms.filter((vm) => !vm.metadata?.deletionTimestamp && ipAddressNameOf(vm) === name);
  if (current && candidates.some((vm) => vm.metadata?.name === current)) return current;
  // The watch's objects carry Dates, a test's plain strings.
  const created = (vm: VmView) => new Date((vm.metadata?.creationTimestamp as string | Date) ?? 0).getTime();
  const oldest = [...candidates].sort(
    (a, b) => created(a) - created(b) || a.metadata!.name!.localeCompare(b.metadata!.name!),
  )[0];
  return oldest?.metadata?.name;
}
