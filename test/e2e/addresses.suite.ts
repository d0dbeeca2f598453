// A VM's own address on the network (issue 41, seed 004): the bed gives VMs addresses from
// 10.66.10.0/24; the guest learns its address by DHCP from its runner, answers at it from a pod
// on the other node (TCP) and from another VM (ping), and keeps it, with an open TCP connection,
// through a live migration; the node agents' routes follow the VM.
import { execFile } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import { useDevBed } from '../support/beds.js';
import { placedOn, testGuestManifest, type ClusterVms, type Vm } from '../support/cluster-vms.js';
import { eventually } from '../support/eventually.js';
import { startNodePod, startTcpStream } from '../support/tcp-stream.js';
import { VM_ROUTE_PROTOCOL } from '../../src/api/vm-network.js';

const run = promisify(execFile);
const NAMESPACE = 'addresses';
const READY = 'VMOP-GUEST-READY';
/** The test guest's TCP echo server. */
const ECHO_PORT = 7;

describe("a VM's own address on the network", () => {
  let vms: ClusterVms;
  const [one, two] = ['vmop-node-1', 'vmop-node-2'];
  const kubectl = (...args: string[]) => vms.kubectl(args);
  const applyVm = (name: string, node: string) =>
    vms.apply(
      testGuestManifest(name, NAMESPACE, { extraSpec: placedOn(node) }).replace(
        '    networks: []\n',
        '    networks: [{user: {}}]\n',
      ),
    );
  /** Running on `node` with its own address on its NIC (the guest agent reports it). */
  const runsWithAddress = (name: string, node: string) =>
    vms.waitForVm(name, (vm) => {
      expect(vm.status?.phase).toBe('Running');
      expect(vm.status?.node).toBe(node);
      expect(vm.status?.virtualMachineIPAddressName).toBeTruthy();
      expect(vm.status?.ipAddress).toMatch(/^10\.66\.10\.\d+$/);
      expect(vm.status?.ipAddresses).toContain(vm.status?.ipAddress);
    });
  const runnerPodOf = async (name: string) => (await vms.getVm(name)).status!.runnerPod!.name;
  /** This node agent's routes on `node`: address → next hop. */
  const routesOn = async (node: string): Promise<Record<string, string>> => {
    const netns = bed.state().nodeServices.find((n) => n.node === node)!.netns;
    const { stdout } = await run('nsenter', [
      `--net=${netns}`,
      ...['ip', '-j', '-4', 'route', 'show', 'proto', String(VM_ROUTE_PROTOCOL)],
    ]);
    const routes = JSON.parse(stdout || '[]') as Array<{ dst: string; gateway: string }>;
    return Object.fromEntries(routes.map((route) => [route.dst, route.gateway]));
  };
  const nodeAddress = async (node: string) =>
    kubectl('get', 'node', node, '-o', 'jsonpath={.status.addresses[?(@.type=="InternalIP")].address}');
  const podAddress = async (pod: string) => kubectl('get', 'pod', pod, '-o', 'jsonpath={.status.podIP}');

  /** A plain pod (no tap of its own) on `node`, with node: the runner image `vmPod` runs. */
  const startPlainPod = (name: string, node: string, vmPod: string) =>
    startNodePod(vms.kubectl, { name, namespace: NAMESPACE, vmPod, node });
  /** One line to the echo server from `pod`: what came back, or the error's code. */
  const echoOnce = async (pod: string, address: string) =>
    (
      await kubectl(
        'exec',
        pod,
        '--',
        'node',
        '-e',
        `const s = require('net').connect(${ECHO_PORT}, process.argv[1], () => s.write('hello\\n'));
       s.setTimeout(10000, () => { console.log('TIMEOUT'); process.exit(0); });
       s.on('data', (d) => { console.log(String(d).trim()); process.exit(0); });
       s.on('error', (e) => { console.log(e.code); process.exit(0); });`,
        address,
      )
    ).trim();

  const bed = useDevBed('dev-2', { namespaces: [NAMESPACE] });
  beforeAll(() => {
    vms = bed.vms(NAMESPACE);
  });

  it('the guest gets its address by DHCP and answers at it from a pod on the other node and from another VM; through a live migration it keeps it and an open TCP connection', async () => {
    await applyVm('served', one);
    await applyVm('client', two);
    const served = await runsWithAddress('served', one);
    const client = await runsWithAddress('client', two);
    const address = served.status!.ipAddress!;
    expect(client.status!.ipAddress).not.toBe(address);
    // The guest printed what DHCP gave it (a /32, from its runner).
    await vms.waitForConsole('served', `vmop-guest: eth0 has ${address}/32 (DHCP)`);
    await vms.waitForConsole('client', READY);

    // Every node routes the address to where the guest runs: its pod on node 1, node 1 elsewhere.
    const servedPod = await runnerPodOf('served');
    await eventually(async () => {
      expect((await routesOn(one))[address]).toBe(await podAddress(servedPod));
      expect((await routesOn(two))[address]).toBe(await nodeAddress(one));
    }, 30_000);

    // From another VM (on the other node): ping.
    await vms.typeOnConsole('client', `ping -c 3 -W 5 ${address} >/dev/null && echo reached-${address}`);
    await vms.waitForConsole('client', `\nreached-${address}\r`);

    // From a plain pod on the VM's node, before and after the VM left it: the node routes the
    // pod's packets back onto the pods' bridge, and must not tell the pod (ICMP redirect) to send
    // them to the VM's pod directly, which it would go on doing after the VM left (EHOSTUNREACH).
    await startPlainPod('neighbour', one, servedPod);
    expect(await echoOnce('neighbour', address)).toBe('hello');

    // From a pod on the other node: a TCP connection, kept open through the move to that node.
    const clientPod = await runnerPodOf('client');
    const connection = startTcpStream((args) => vms.kubectl(args), clientPod, 'runner', address, ECHO_PORT);
    await sleep(2_000);
    const opName = `served-migrate-${Date.now()}`;
    await vms.apply(`apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineOperation
metadata: {name: ${opName}, namespace: ${NAMESPACE}}
spec: {virtualMachineName: served, type: Migrate}
`);
    await eventually(
      async () => {
        const op = JSON.parse(await kubectl('get', 'vmop', opName, '-o', 'json')) as {
          status?: { phase?: string };
        };
        expect(op.status?.phase).toBe('Completed');
      },
      300_000,
      500,
    );
    const moved: Vm = await runsWithAddress('served', two);
    expect(moved.status!.ipAddress).toBe(address);
    await sleep(2_000);
    const seen = await connection.stop();
    // No reset, no close: every line sent came back, and the longest wait for one is the move's gap.
    expect(seen).toMatchObject({ connected: true });
    expect(seen.error).toBeUndefined();
    expect(seen.closed).toBeUndefined();
    expect(seen.sent).toBeGreaterThan(100);
    expect(seen.echoed).toBe(seen.sent);
    console.log(
      `TCP through the move: ${seen.sent} lines, longest gap ${seen.longestGapMs} ms; QEMU's downtime ${moved.status?.migrationState?.downtimeMs} ms`,
    );

    // The routes followed: node 2 to the target pod, node 1 to node 2.
    const targetPod = moved.status!.runnerPod!.name;
    expect(targetPod).not.toBe(servedPod);
    await eventually(async () => {
      expect((await routesOn(two))[address]).toBe(await podAddress(targetPod));
      expect((await routesOn(one))[address]).toBe(await nodeAddress(two));
    }, 30_000);
    // And the other VM still reaches it where it is now.
    await vms.typeOnConsole(
      'client',
      `ping -c 3 -W 5 ${address} >/dev/null && echo reached-again-${address}`,
    );
    await vms.waitForConsole('client', `\nreached-again-${address}\r`);
    expect(await echoOnce('neighbour', address)).toBe('hello');
  }, 900_000);

  it('a VM that is deleted takes its route with it', async () => {
    const address = (await vms.getVm('served')).status!.ipAddress!;
    await kubectl('delete', 'vm', 'served', 'client', '--wait=true', '--timeout=180s');
    await kubectl('delete', 'pod', 'neighbour', '--wait=false');
    await eventually(async () => {
      expect((await routesOn(one))[address]).toBeUndefined();
      expect((await routesOn(two))[address]).toBeUndefined();
    }, 60_000);
  }, 240_000);
});
