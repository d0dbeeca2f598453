// The local cluster's network: a "switch" network namespace holding one L2 bridge, this machine
// joined to it by a veth pair (the apiserver and the dev Redis listen on that address), and one
// network namespace per node, each joined to the bridge. Nodes route the other nodes' pod ranges
// to each other over the bridge, so pods reach pods on any node; nothing is routed through this
// machine (its forwarding stays off). Everything a node changes (its pods' bridge, kube-proxy's
// iptables rules, sysctls) stays in its namespace; deleting the namespaces removes all of it.
import { execFile } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface NodeNetwork {
  /** The node's network namespace (`ip netns`) and its path, for `nsenter --net=`. */
  netns: string;
  netnsPath: string;
  /** The node's address on the cluster bridge: its InternalIP, where kubelet serves. */
  nodeAddress: string;
  /** This node's pods get addresses from here (on a bridge inside its namespace). */
  podCidr: string;
}

export interface ClusterNetwork {
  /** The switch namespace (the bridge lives there); the nodes' are `<switchNetns>-<i>`. */
  switchNetns: string;
  /** This machine's address on the cluster bridge. */
  hostAddress: string;
  hostInterface: string;
  nodes: NodeNetwork[];
}

/** Cluster `n` uses 10.250.n.0/24: .1 for this machine, .(i+1) for node i; node i's pods 10.244.i.0/24. */
const SUBNET_PREFIX = '10.250';
/** All nodes' pod ranges (kube-proxy's cluster CIDR). */
export const CLUSTER_POD_CIDR = '10.244.0.0/16';
const podCidrOf = (node: number) => `10.244.${node}.0/24`;
const LOCK_DIR = '/run/vmop';

/** The command prefix that runs a program in the node's network namespace (and nothing else's). */
export function inNodeNetwork(network: NodeNetwork): string[] {
  return ['nsenter', `--net=${network.netnsPath}`, '--'];
}

/*
 * Picks the next n after the last one handed out whose 10.250.n.0/24 no interface uses and no
 * namespace claims, and creates the switch namespace with its bridge, this machine's veth into it,
 * and the nodes' namespaces with their veths and routes, under a lock that other clusters starting
 * at the same time share. $1 is the number of nodes, $2 the file holding the last n. Prints n.
 * Not the lowest free n: a cluster just stopped would hand its names (namespaces, cgroup roots) to
 * the next one at once, and whoever checks that the stopped one left nothing would find the new one.
 */
const CREATE_SCRIPT = `
set -eu
nodes=$1
last_file=$2
n=$(cat "$last_file" 2>/dev/null || echo 0)
case $n in ''|*[!0-9]*) n=0 ;; esac
tries=0
while [ $tries -lt 254 ]; do
  n=$((n % 254 + 1))
  if ! ip -o -4 addr show | grep -q "inet ${SUBNET_PREFIX}.$n\\." && [ ! -e /run/netns/vmop-$n ]; then break; fi
  tries=$((tries + 1))
done
[ $tries -lt 254 ] || { echo "no free ${SUBNET_PREFIX}.n.0/24 for a cluster network" >&2; exit 1; }
echo $n >"$last_file"
sw=vmop-$n
cleanup() {
  i=1
  while [ $i -le $nodes ]; do ip netns delete $sw-$i 2>/dev/null || true; i=$((i + 1)); done
  ip netns delete $sw 2>/dev/null || true
}
trap cleanup EXIT
ip netns add $sw
ip -n $sw link set lo up
ip -n $sw link add br0 type bridge
ip -n $sw link set br0 up
ip link add vmop\${n}h type veth peer name host netns $sw
ip -n $sw link set host master br0 up
ip addr add ${SUBNET_PREFIX}.$n.1/24 dev vmop\${n}h
ip link set vmop\${n}h up
i=1
while [ $i -le $nodes ]; do
  ns=$sw-$i
  ip netns add $ns
  ip -n $sw link add node$i type veth peer name eth0 netns $ns
  ip -n $sw link set node$i master br0 up
  ip -n $ns addr add ${SUBNET_PREFIX}.$n.$((i + 1))/24 dev eth0
  ip -n $ns link set eth0 up
  ip -n $ns link set lo up
  ip -n $ns route add default via ${SUBNET_PREFIX}.$n.1
  # Pods route through the node, and bridged pod-to-service replies must pass kube-proxy's NAT.
  nsenter --net=/run/netns/$ns -- sysctl -q -w net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
  # Pods keep their addresses towards the other nodes' pods, as a cluster's network must (a
  # NetworkPolicy names pods by them); the rest they reach through the node's address.
  nsenter --net=/run/netns/$ns -- iptables -t nat -A POSTROUTING -s 10.244.$i.0/24 ! -d ${CLUSTER_POD_CIDR} -j MASQUERADE
  j=1
  while [ $j -le $nodes ]; do
    [ $j -eq $i ] || ip -n $ns route add 10.244.$j.0/24 via ${SUBNET_PREFIX}.$n.$((j + 1))
    j=$((j + 1))
  done
  i=$((i + 1))
done
trap - EXIT
echo $n
`;

/** Creates the switch, this machine's link to it and `nodes` node namespaces on the first free 10.250.n.0/24. */
export async function createClusterNetwork(nodes: number): Promise<ClusterNetwork> {
  await mkdir(LOCK_DIR, { recursive: true });
  const { stdout } = await run('flock', [
    `${LOCK_DIR}/network.lock`,
    ...['sh', '-c', CREATE_SCRIPT, 'create-cluster-network', String(nodes), `${LOCK_DIR}/network.last`],
  ]);
  const n = Number(stdout.trim());
  return {
    switchNetns: `vmop-${n}`,
    hostAddress: `${SUBNET_PREFIX}.${n}.1`,
    hostInterface: `vmop${n}h`,
    nodes: Array.from({ length: nodes }, (_, index) => {
      const i = index + 1;
      return {
        netns: `vmop-${n}-${i}`,
        netnsPath: `/run/netns/vmop-${n}-${i}`,
        nodeAddress: `${SUBNET_PREFIX}.${n}.${i + 1}`,
        podCidr: podCidrOf(i),
      };
    }),
  };
}

/** Deleting the namespaces deletes the veth pairs (and the bridges, and the rules) with them. */
export async function deleteClusterNetwork(network: ClusterNetwork): Promise<void> {
  for (const node of network.nodes) await run('ip', ['netns', 'delete', node.netns]).catch(() => undefined);
  await run('ip', ['netns', 'delete', network.switchNetns]).catch(() => undefined);
}

/** Cuts the node off the cluster network (its link on the switch goes down), as a failed link would. */
export async function cutNodeLink(network: ClusterNetwork, node: number, up: boolean): Promise<void> {
  await run('ip', ['-n', network.switchNetns, 'link', 'set', `node${node + 1}`, up ? 'up' : 'down']);
}
