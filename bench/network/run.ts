// npm run bench:network — a guest's TCP port reached as a pod's (issue 55), against pod-to-pod on
// the same nodes, on `vmop dev` with two nodes. One VM (the test guest: 1 vCPU, 256 MiB, TCG) on
// node 1 forwards its echo port (busybox `nc -e cat`); a plain pod beside it on node 1 runs an echo
// server (node), the baseline. Clients in pods on node 1 and node 2 measure each target:
// - throughput: 32 MiB sent and echoed back on one connection (MB/s each way);
// - latency: round trips of one line on an open connection, and a new connection per request
//   (connect, line, echo: what a Service's client sees), p50 and p99.
// Targets: the VM's pod address (QEMU's `user` forwarding, hostfwd); with BENCH_ROUTED=1 the VM has
// an address of its own instead, and the targets are that address (routed through the node agent's
// tap) and the pod's address (the runner's relay). Ratios to the baseline; the goal is
// ≥ 0.5× the pod-to-pod throughput. BENCH_RUNS throughput runs per target (default 3, the median).
// Last, the NetworkPolicy enforcer's cost (kube-router's firewall, as the local nodes run it):
// pod-to-pod with a policy selecting the echo pod, against the same once kube-router is stopped and
// its rules removed (`kube-router --cleanup-config`).
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { promisify } from 'node:util';
import os from 'node:os';
import path from 'node:path';
import { startDevEnvironment } from '../../src/devenv/dev-environment.js';
import { locateNodeBinaries } from '../../src/devenv/kube-binaries.js';
import { clusterVms, testGuestManifest } from '../../test/support/cluster-vms.js';
import { startNodePod } from '../../test/support/tcp-stream.js';
import { ECHO_HEADER, echoRow, measureEcho } from '../support/echo-client.js';

const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const ROUTED = process.env.BENCH_ROUTED === '1';
const NAMESPACE = 'default';
const VM = 'bench-net';
const ECHO_PORT = 7;
const BASELINE_PORT = 7007;
const run = promisify(execFile);
/** Every pod of the namespace is selected, and may be reached from every pod of the cluster. */
const ALLOW_FROM_PODS = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: bench-allow-pods, namespace: ${NAMESPACE}}
spec:
  podSelector: {}
  ingress: [{from: [{namespaceSelector: {}}]}]
`;

async function main() {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'vmop-bench-network-'));
  const env = await startDevEnvironment({ dir, nodes: 2, ...(ROUTED && { vmCidrs: ['10.66.10.0/24'] }) });
  const vms = clusterVms(env.state.kubeconfig, NAMESPACE);
  const [one, two] = env.cluster.nodes.map((node) => node.name);
  try {
    await vms.apply(
      testGuestManifest(VM, NAMESPACE, { extraSpec: `  nodeName: ${one}\n` }).replace(
        '    networks: []\n',
        `    networks: [{user: {ports: [{port: ${ECHO_PORT}}]}}]\n`,
      ),
    );
    const running = await vms.waitForVm(
      VM,
      (vm) => {
        if (vm.status?.phase !== 'Running') throw new Error('not yet');
        if (ROUTED && !vm.status.ipAddresses?.includes(vm.status.ipAddress ?? ''))
          throw new Error('no address yet');
      },
      300_000,
    );
    await vms.waitForConsole(VM, 'VMOP-GUEST-READY');
    const vmPod = running.status!.runnerPod!.name;
    const podIP = await vms.kubectl(['get', 'pod', vmPod, '-o', 'jsonpath={.status.podIP}']);
    // The baseline: an echo server with node in a pod beside the VM.
    await startNodePod(vms.kubectl, {
      name: 'bench-echo',
      namespace: NAMESPACE,
      vmPod,
      node: one!,
      script: `require('net').createServer((s) => { s.setNoDelay(true); s.pipe(s); }).listen(${BASELINE_PORT})`,
    });
    const baselineIP = await vms.kubectl(['get', 'pod', 'bench-echo', '-o', 'jsonpath={.status.podIP}']);
    for (const [name, node] of [
      ['client-1', one],
      ['client-2', two],
    ])
      await startNodePod(vms.kubectl, { name: name!, namespace: NAMESPACE, vmPod, node: node! });

    const targets: Array<[string, string, number]> = ROUTED
      ? [
          ['own address (routed tap)', running.status!.ipAddress!, ECHO_PORT],
          ["pod's address (runner's relay)", podIP, ECHO_PORT],
        ]
      : [["pod's address (QEMU's user forwarding)", podIP, ECHO_PORT]];
    console.log(`VM ${VM} on ${one} (TCG, 1 vCPU); ${RUNS} runs per target (the median throughput)\n`);
    for (const [client, where] of [
      ['client-1', 'from node 1'],
      ['client-2', 'from node 2'],
    ]) {
      const exec = (args: string[]) => vms.kubectl(['exec', client!, '--', 'node', ...args]);
      console.log(`${where}: ${ECHO_HEADER}`);
      const baseline = await measureEcho(exec, baselineIP, BASELINE_PORT, RUNS);
      console.log(`${where}: ${echoRow('pod to pod (baseline)', baseline, baseline)}`);
      for (const [label, host, port] of targets) {
        const seen = await measureEcho(exec, host, port, RUNS);
        const met = seen.mbs >= 0.5 * baseline.mbs;
        console.log(`${where}: ${echoRow(label, seen, baseline)}  (goal ≥ 0.5×: ${met ? 'MET' : 'MISSED'})`);
      }
    }

    const clients = [
      ['client-1', 'from node 1'],
      ['client-2', 'from node 2'],
    ] as const;
    const exec = (client: string) => (args: string[]) => vms.kubectl(['exec', client, '--', 'node', ...args]);
    await vms.kubectl(['apply', '-f', '-'], ALLOW_FROM_PODS);
    await new Promise((resolve) => setTimeout(resolve, 5_000)); // kube-router syncs the policy
    const enforced = [];
    for (const [client] of clients)
      enforced.push(await measureEcho(exec(client), baselineIP, BASELINE_PORT, RUNS));
    const { kubeRouter } = await locateNodeBinaries();
    for (const node of env.cluster.nodes) {
      await node.service('kube-router')?.stop(10_000);
      await run('nsenter', [`--net=${node.network.netnsPath}`, '--', kubeRouter, '--cleanup-config']);
    }
    console.log(`\nthe NetworkPolicy enforcer (kube-router's firewall), pod to pod: ${ECHO_HEADER}`);
    for (const [index, [client, where]] of clients.entries()) {
      const open = await measureEcho(exec(client), baselineIP, BASELINE_PORT, RUNS);
      console.log(`${where}: ${echoRow('no enforcer', open, open)}`);
      console.log(`${where}: ${echoRow('a policy selects the server, enforced', enforced[index]!, open)}`);
    }
  } finally {
    await env.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
