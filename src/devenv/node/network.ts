// The node's own network namespace, joined to this machine by a veth pair. Everything the node
// changes in networking (the pods' bridge, kube-proxy's iptables rules, sysctls) stays in there,
// so several local clusters can run at once and deleting the namespace removes all of it.
import { execFile } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface NodeNetwork {
  /** The network namespace's name (`ip netns`) and its path, for `nsenter --net=`. */
  netns: string;
  netnsPath: string;
  /** This machine's end of the veth pair: the apiserver (and dev Redis) listen here. */
  hostAddress: string;
  /** The node's end: its InternalIP, where kubelet serves. */
  nodeAddress: string;
  hostInterface: string;
}

/** The /30 of node `n` is 10.250.n.0: .1 for this machine, .2 for the node. */
const SUBNET_PREFIX = '10.250';
const LOCK_DIR = '/run/vmop';

/** The command prefix that runs a program in the node's network namespace (and nothing else's). */
export function inNodeNetwork(network: NodeNetwork): string[] {
  return ['nsenter', `--net=${network.netnsPath}`, '--'];
}

/*
 * Picks the first n whose 10.250.n.0/30 no interface uses and no namespace claims, and creates the
 * namespace and the veth pair, under a lock that other clusters starting at the same time share.
 * Prints n.
 */
const CREATE_SCRIPT = `
set -eu
n=1
while [ $n -lt 255 ]; do
  if ! ip -o -4 addr show | grep -q "inet ${SUBNET_PREFIX}.$n\\." && [ ! -e /run/netns/vmop-$n ]; then break; fi
  n=$((n + 1))
done
[ $n -lt 255 ] || { echo "no free ${SUBNET_PREFIX}.n.0/30 for a node network" >&2; exit 1; }
ip netns add vmop-$n
trap 'ip netns delete vmop-$n' EXIT
ip link add vmop\${n}h type veth peer name vmop\${n}n netns vmop-$n
ip addr add ${SUBNET_PREFIX}.$n.1/30 dev vmop\${n}h
ip link set vmop\${n}h up
ip -n vmop-$n addr add ${SUBNET_PREFIX}.$n.2/30 dev vmop\${n}n
ip -n vmop-$n link set vmop\${n}n up
ip -n vmop-$n link set lo up
ip -n vmop-$n route add default via ${SUBNET_PREFIX}.$n.1
# Pods route through the node, and bridged pod-to-service replies must pass kube-proxy's NAT.
nsenter --net=/run/netns/vmop-$n -- sysctl -q -w net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
trap - EXIT
echo $n
`;

/** Creates the namespace and the veth pair on the first free 10.250.n.0/30. */
export async function createNodeNetwork(): Promise<NodeNetwork> {
  await mkdir(LOCK_DIR, { recursive: true });
  const { stdout } = await run('flock', [`${LOCK_DIR}/network.lock`, 'sh', '-c', CREATE_SCRIPT]);
  const n = Number(stdout.trim());
  return {
    netns: `vmop-${n}`,
    netnsPath: `/run/netns/vmop-${n}`,
    hostAddress: `${SUBNET_PREFIX}.${n}.1`,
    nodeAddress: `${SUBNET_PREFIX}.${n}.2`,
    hostInterface: `vmop${n}h`,
  };
}

/** Deleting the namespace deletes the veth pair (and the bridge, and the rules) with it. */
export async function deleteNodeNetwork(network: NodeNetwork): Promise<void> {
  await run('ip', ['netns', 'delete', network.netns]).catch(() => undefined);
}
