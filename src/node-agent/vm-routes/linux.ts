// The node agent's hands on the node's network (iproute2): its own routes (protocol
// VM_ROUTE_PROTOCOL, so it never touches anyone else's) and the taps in runner pods' network
// namespaces, entered through a process of the pod (the agent sees the host's PIDs).
import { execFile } from 'node:child_process';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import {
  ROUTED_GATEWAY,
  ROUTED_TAP,
  ROUTED_TAP_MAC,
  VM_ROUTE_PROTOCOL,
  type RoutedNic,
} from '../../api/vm-network.js';
import { NONROOT_USER } from '../../reconcilers/virtual-machine/pod-security.js';

const run = promisify(execFile);

/** This agent's routes now: address → next hop. */
export async function vmRoutes(): Promise<Map<string, string>> {
  const { stdout } = await run('ip', ['-j', '-4', 'route', 'show', 'proto', String(VM_ROUTE_PROTOCOL)]);
  const routes = JSON.parse(stdout || '[]') as Array<{ dst: string; gateway?: string }>;
  return new Map(routes.map((route) => [route.dst.replace(/\/32$/, ''), route.gateway ?? '']));
}

export async function replaceVmRoute(address: string, via: string): Promise<void> {
  await run('ip', ['route', 'replace', `${address}/32`, 'via', via, 'proto', String(VM_ROUTE_PROTOCOL)]);
}

export async function removeVmRoute(address: string): Promise<void> {
  await run('ip', ['route', 'del', `${address}/32`, 'proto', String(VM_ROUTE_PROTOCOL)]);
}

/**
 * A process of the pod (its sandbox's pause process, or any of its containers'): found by the pod's
 * uid in the cgroup paths, which kubelet makes with either cgroup driver (cgroupfs: `pod<uid>`,
 * systemd: `pod<uid with _>.slice`).
 */
export async function processOfPod(uid: string, proc = '/proc'): Promise<number | undefined> {
  const marks = [`pod${uid}`, `pod${uid.replaceAll('-', '_')}`];
  for (const entry of await readdir(proc)) {
    if (!/^\d+$/.test(entry)) continue;
    const cgroups = await readFile(`${proc}/${entry}/cgroup`, 'utf8').catch(() => '');
    if (marks.some((mark) => cgroups.includes(mark))) return Number(entry);
  }
  return undefined;
}

/**
 * In the pod's network namespace: the tap (user NONROOT_USER may open it), the gateway address on
 * it, the guest's /32 through it with the guest's MAC fixed (the runner's DHCP answers by unicast
 * before the guest has its address), and forwarding between the pod's interface and the tap.
 * Idempotent: run again, it changes nothing.
 */
export async function setUpPodTap(pid: number, nic: RoutedNic): Promise<void> {
  const script = `set -e
ip link show ${ROUTED_TAP} >/dev/null 2>&1 || ip tuntap add dev ${ROUTED_TAP} mode tap user ${NONROOT_USER} group ${NONROOT_USER}
ip link set ${ROUTED_TAP} address ${ROUTED_TAP_MAC}
ip link set ${ROUTED_TAP} up
ip addr replace ${ROUTED_GATEWAY}/32 dev ${ROUTED_TAP}
ip route replace "$1/32" dev ${ROUTED_TAP} src ${ROUTED_GATEWAY}
ip neigh replace "$1" lladdr "$2" dev ${ROUTED_TAP} nud permanent
echo 1 >/proc/sys/net/ipv4/ip_forward
`;
  await run('nsenter', [
    `--net=/proc/${pid}/ns/net`,
    '--',
    'sh',
    '-c',
    script,
    'vmop-tap',
    nic.address,
    nic.mac,
  ]);
}

/** The nat chain whose rules keep pods' traffic to the VM subnets from being masqueraded. */
const NO_MASQUERADE_CHAIN = 'VMOP-NO-MASQUERADE';

/**
 * Pods' traffic to VMs keeps its source address: a CNI that masquerades pods' traffic to anything
 * outside the pod network (the bridge plugin's ipMasq) would otherwise masquerade it, and Linux
 * drops a masqueraded connection once its packets leave by another interface, which is what a
 * VM's route does when the VM moves onto or off this node (the client saw a reset). As
 * ip-masq-agent's nonMasqueradeCIDRs: first in POSTROUTING, ACCEPT (no NAT) for the VM subnets.
 */
export async function keepMasqueradeOff(cidrs: readonly string[]): Promise<void> {
  if (cidrs.length === 0) return;
  const iptables = (...args: string[]) => run('iptables', ['-w', '-t', 'nat', ...args]);
  const ensure = (check: string[], add: string[]) => iptables('-C', ...check).catch(() => iptables(...add));
  await iptables('-N', NO_MASQUERADE_CHAIN).catch(() => undefined); // exists already
  const jump = ['POSTROUTING', '-j', NO_MASQUERADE_CHAIN];
  await ensure(jump, ['-I', 'POSTROUTING', '1', '-j', NO_MASQUERADE_CHAIN]);
  for (const cidr of cidrs) {
    const rule = [NO_MASQUERADE_CHAIN, '-d', cidr, '-j', 'ACCEPT'];
    await ensure(rule, ['-A', ...rule]);
  }
}

/** Packets QEMU sent on the pod's tap (its receive count on the pod's side), from /proc/<pid>/net/dev. */
export async function tapPacketsFromGuest(pid: number, proc = '/proc'): Promise<number> {
  const table = await readFile(`${proc}/${pid}/net/dev`, 'utf8').catch(() => '');
  const line = table.split('\n').find((row) => row.trim().startsWith(`${ROUTED_TAP}:`));
  return Number(line?.split(':')[1]?.trim().split(/\s+/)[1] ?? 0);
}

/** The pod's QEMU process, if it has one now. */
export async function qemuOfPod(uid: string, proc = '/proc'): Promise<number | undefined> {
  const marks = [`pod${uid}`, `pod${uid.replaceAll('-', '_')}`];
  for (const entry of await readdir(proc)) {
    if (!/^\d+$/.test(entry)) continue;
    const comm = await readFile(`${proc}/${entry}/comm`, 'utf8').catch(() => '');
    if (!comm.startsWith('qemu-system')) continue;
    const cgroups = await readFile(`${proc}/${entry}/cgroup`, 'utf8').catch(() => '');
    if (marks.some((mark) => cgroups.includes(mark))) return Number(entry);
  }
  return undefined;
}

/** Whether that QEMU process still runs (a zombie has ended too). */
export async function qemuRuns(pid: number, proc = '/proc'): Promise<boolean> {
  const stat = await readFile(`${proc}/${pid}/stat`, 'utf8').catch(() => '');
  const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  return stat.includes('(qemu-system') && state !== 'Z' && state !== 'X';
}

/**
 * This node sends no ICMP redirects. A pod whose packets to a VM on this node the node routes back
 * onto the pods' bridge would be told to send them to the VM's pod directly, and would keep that
 * for minutes after the VM moved away (connections then fail with EHOSTUNREACH, as the migration
 * bench's client pod did). Off for every interface, and by default for new ones (pods' veths).
 */
export async function sendNoRedirects(conf = '/proc/sys/net/ipv4/conf'): Promise<void> {
  for (const name of await readdir(conf))
    await writeFile(`${conf}/${name}/send_redirects`, '0').catch(() => undefined); // gone meanwhile
}
