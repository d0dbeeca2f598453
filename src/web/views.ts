// What the GUI shows of a VM, a pool and a node: small, flat, and only what the person may know. Pure.
import type { V1Node } from '@kubernetes/client-node';
import { KVM_DEVICE } from '../api/node-devices.js';
import { parseMemorySize } from '../api/runner-config.js';
import { maximumCpus } from '../reconcilers/virtual-machine/runner-config/config.js';
import type { VirtualMachine } from '../api/virtual-machine.js';
import type { VmPool } from '../api/vm-pool.js';
import type { Action } from './permissions.js';

export interface VmView {
  namespace: string;
  name: string;
  /** spec.vm.state: what is asked for. */
  state: string;
  phase: string;
  message?: string;
  cpus: number;
  ram: string;
  /** `ram` in bytes (0 when unknown), so the page sorts by it without parsing quantities. */
  ramBytes: number;
  currentCpus?: number;
  maximumCpus: number;
  currentRam?: string;
  maximumRam: string;
  node?: string;
  /** The VM's address (its VirtualMachineIPAddress's, else the guest agent's first). */
  ipAddress?: string;
  /** From qemu-guest-agent: e.g. {id: "debian", prettyName: "Debian GNU/Linux 13 (trixie)"}. */
  os?: { id?: string; prettyName?: string };
  pools: string[];
  assignment?: { pool: string; user: string; lastUsed: string };
  consoleConnected: boolean;
  /** Who the guest's vmop agent says is logged in. */
  loggedInUser?: string;
  /** A SPICE display to open in the page (besides the serial console every VM has). */
  spice: boolean;
  /** A VNC display to open in the page. */
  vnc: boolean;
  may: Action[];
}

export interface PoolView {
  namespace: string;
  name: string;
  retention: string;
  /** The person's VM of the pool, if they have one. */
  assignedVm?: string;
  /** VMs of the pool, and how many of them are assigned. */
  members: number;
  assigned: number;
  may: Action[];
}

/** A memory quantity in bytes; 0 when there is none or it is not one. */
const bytesOf = (quantity: string | undefined) => (quantity && parseMemorySize(quantity)) || 0;

export function vmView(vm: VirtualMachine, may: Iterable<Action>): VmView {
  const { status } = vm;
  const running = status?.conditions?.find((c) => c.type === 'Running');
  const osinfo = status?.osinfo as Record<string, unknown> | undefined;
  const text = (value: unknown) => (typeof value === 'string' ? value : undefined);
  return {
    namespace: vm.metadata.namespace!,
    name: vm.metadata.name,
    state: vm.spec.vm.state,
    phase: status?.phase ?? 'Pending',
    ...(running?.message && { message: running.message }),
    cpus: status?.cpus ?? 0,
    ram: status?.ram ?? '0',
    ramBytes: bytesOf(status?.ram),
    ...(vm.spec.vm.currentCpus !== undefined && { currentCpus: vm.spec.vm.currentCpus }),
    maximumCpus: maximumCpus(vm.spec.vm),
    ...(vm.spec.vm.currentRam !== undefined && { currentRam: String(vm.spec.vm.currentRam) }),
    maximumRam: String(vm.spec.vm.maximumRam),
    ...(status?.node && { node: status.node }),
    ...(status?.ipAddress && { ipAddress: status.ipAddress }),
    ...(osinfo && {
      os: { id: text(osinfo.id), prettyName: text(osinfo['pretty-name']) ?? text(osinfo.name) },
    }),
    pools: vm.spec.pools,
    ...(status?.assignment && { assignment: status.assignment }),
    consoleConnected: !!status?.consoleClient,
    ...(status?.loggedInUser && { loggedInUser: status.loggedInUser }),
    spice: vm.spec.vm.display.spice !== undefined,
    vnc: vm.spec.vm.display.vnc !== undefined,
    may: [...may].sort(),
  };
}

export function poolView(
  pool: VmPool,
  members: VirtualMachine[],
  user: string,
  may: Iterable<Action>,
): PoolView {
  const name = pool.metadata.name;
  const assigned = members.filter((vm) => vm.status?.assignment?.pool === name);
  return {
    namespace: pool.metadata.namespace!,
    name,
    retention: pool.spec.retention,
    ...(assigned.find((vm) => vm.status!.assignment!.user === user) && {
      assignedVm: assigned.find((vm) => vm.status!.assignment!.user === user)!.metadata.name,
    }),
    members: members.length,
    assigned: assigned.length,
    may: [...may].sort(),
  };
}

export interface NodeView {
  name: string;
  ready: boolean;
  /** False when cordoned: no new VM starts there, running ones stay until moved. */
  schedulable: boolean;
  /** What the node offers pods (allocatable). */
  cpus: number;
  ramBytes: number;
  /** How many VMs the node can run at once: its KVM device slots; absent without vmop's agent. */
  vmSlots?: number;
  /** VMs placed on the node (not stopped), how many of them run, and what they hold. */
  vms: number;
  running: number;
  cpusHeld: number;
  ramHeldBytes: number;
}

/** A CPU quantity ("2", "1900m") in cores; 0 when it is none. */
function cores(quantity: string | undefined): number {
  const match = /^(\d+(?:\.\d+)?)(m?)$/.exec(quantity ?? '');
  if (!match) return 0;
  return match[2] ? Number(match[1]) / 1000 : Number(match[1]);
}

/** Each node with the VMs on it, by name. */
export function nodeViews(nodes: V1Node[], vms: VirtualMachine[]): NodeView[] {
  return nodes
    .map((node) => {
      const name = node.metadata!.name!;
      const allocatable = node.status?.allocatable ?? {};
      const placed = vms.filter(
        (vm) => vm.status?.node === name && (vm.status.phase ?? 'Stopped') !== 'Stopped',
      );
      const slots = allocatable[KVM_DEVICE];
      return {
        name,
        ready: node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false,
        schedulable: !node.spec?.unschedulable,
        cpus: cores(allocatable.cpu),
        ramBytes: bytesOf(allocatable.memory),
        ...(slots !== undefined && { vmSlots: Number(slots) }),
        vms: placed.length,
        running: placed.filter((vm) => vm.status!.phase === 'Running').length,
        cpusHeld: placed.reduce((sum, vm) => sum + (vm.status!.cpus ?? 0), 0),
        ramHeldBytes: placed.reduce((sum, vm) => sum + bytesOf(vm.status!.ram), 0),
      };
    })
    .sort((a, b) => a.name.localeCompare(b.name));
}
