// A VM's own address on the network (issue 41, seed 004): the bed gives VMs addresses from
// 10.66.10.0/24; the guest learns its address by DHCP from its runner, answers at it from a pod
// on the other node (TCP) and from another VM (ping), and keeps it, with an open TCP connection,
// through a live migration; the node agents' routes follow the VM, and only its lease: a tenant
// who edits her pod, her VM and what her runner credential reports gets no route to another's.
import { execFile } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import { useDevBed } from '../support/beds.js';
import { placedOn, testGuestManifest, type ClusterVms, type Vm } from '../support/cluster-vms.js';
import { eventually } from '../support/eventually.js';
import { expectUnbroken, startNodePod, startServiceProbe, startTcpStream } from '../support/tcp-stream.js';
import { snapshotRedisKey } from '../../src/api/runner-snapshot.js';
import { ROUTED_NIC_ANNOTATION, VM_ROUTE_PROTOCOL } from '../../src/api/vm-network.js';
import { openRedis } from '../../src/queue/connection.js';

const run = promisify(execFile);
const NAMESPACE = 'addresses';
/** A tenant's namespace: she may edit there, nowhere else. */
const TEAM_B = 'addresses-team-b';
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
        `    networks: [{user: {ports: [{port: ${ECHO_PORT}}]}}]\n`,
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
  /** One line to the echo server from `pod` (at `port` of `address`): what came back, or the error's code. */
  const echoOnce = async (pod: string, address: string, port = ECHO_PORT) =>
    (
      await kubectl(
        'exec',
        pod,
        '--',
        'node',
        '-e',
        `const s = require('net').connect(${port}, process.argv[1], () => s.write('hello\\n'));
       s.setTimeout(10000, () => { console.log('TIMEOUT'); process.exit(0); });
       s.on('data', (d) => { console.log(String(d).trim()); process.exit(0); });
       s.on('error', (e) => { console.log(e.code); process.exit(0); });`,
        address,
      )
    ).trim();

  const bed = useDevBed('dev-2', { namespaces: [NAMESPACE, TEAM_B] });
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

    // A Service on the VM (its runner relays the guest port from its pod to the guest's address)
    // reaches the guest from a pod on each node.
    const clientPod = await runnerPodOf('client');
    await run(
      'bin/vmop',
      ['vm', 'expose', 'served', '--port', '7007', '--target-port', String(ECHO_PORT), '-n', NAMESPACE],
      {
        env: bed.env(NAMESPACE),
      },
    );
    const service = `served.${NAMESPACE}.svc.cluster.local`;
    for (const pod of ['neighbour', clientPod])
      await eventually(async () => expect(await echoOnce(pod, service, 7007)).toBe('hello'), 60_000, 1_000);

    // From a pod on the other node: a TCP connection, kept open through the move to that node; and
    // new connections through the Service all the while.
    const connection = startTcpStream((args) => vms.kubectl(args), clientPod, 'runner', address, ECHO_PORT);
    const serviceProbe = startServiceProbe((args) => vms.kubectl(args), 'neighbour', service, 7007);
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
    expectUnbroken(seen);
    const throughService = await serviceProbe.stop();
    console.log(
      `TCP through the move: ${seen.sent} lines, longest gap ${seen.longestGapMs} ms; QEMU's downtime ${moved.status?.migrationState?.downtimeMs} ms; ` +
        `new connections through the Service: ${throughService.answered} of ${throughService.attempts} answered, longest outage ${throughService.longestOutageMs} ms`,
    );
    expect(throughService.answered).toBeGreaterThan(0);

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
    // The Service follows the guest: only the target pod is its endpoint, from both nodes.
    const endpoints = await kubectl(
      'get',
      'endpointslices',
      '-l',
      'kubernetes.io/service-name=served',
      '-o',
      'json',
    );
    const ready = (
      JSON.parse(endpoints) as {
        items: Array<{
          endpoints?: Array<{ targetRef?: { name: string }; conditions?: { ready?: boolean } }>;
        }>;
      }
    ).items
      .flatMap((slice) => slice.endpoints ?? [])
      .filter((endpoint) => endpoint.conditions?.ready)
      .map((endpoint) => endpoint.targetRef?.name);
    expect(ready).toEqual([targetPod]);
    for (const pod of ['neighbour', clientPod]) expect(await echoOnce(pod, service, 7007)).toBe('hello');
  }, 900_000);

  it("a tenant cannot take another VM's address: her pod's annotation, her VM's claim and her runner credential's word route nothing to her", async () => {
    // mallory may edit team-b (the built-in role, with vmop's aggregated into it) and nothing else.
    const teamB = bed.vms(TEAM_B);
    await teamB.kubectl(['create', 'rolebinding', 'mallory-edit', '--clusterrole=edit', '--user=mallory']);
    const mallory = (args: string[], input?: string) => teamB.kubectl(['--as', 'mallory', ...args], input);
    const victim = await vms.getVm('served');
    const address = victim.status!.ipAddress!;
    const routesBefore = { [one]: (await routesOn(one))[address], [two]: (await routesOn(two))[address] };
    expect(Object.values(routesBefore).every(Boolean)).toBe(true);

    await mallory(
      ['apply', '-f', '-'],
      testGuestManifest('evil', TEAM_B).replace('    networks: []\n', '    networks: [{user: {}}]\n'),
    ).catch((err: { stderr?: string }) => {
      throw new Error(`mallory could not make her VM: ${err.stderr}`);
    });
    const evil = await teamB.waitForVm('evil', (vm) => {
      expect(vm.status?.runnerPod?.name).toBeTruthy();
      expect(vm.status?.ipAddress).toMatch(/^10\.66\.10\.\d+$/);
    });
    const evilPod = evil.status!.runnerPod!.name;
    await eventually(async () =>
      expect(await teamB.kubectl(['get', 'pod', evilPod, '-o', 'jsonpath={.status.podIP}'])).toBeTruthy(),
    );
    // Her runner pod says it carries the victim's address; her VM names a claim that does not exist.
    const nic = JSON.stringify({ address, mac: '02:00:00:00:00:66' });
    await mallory(['annotate', 'pod', evilPod, '--overwrite', `${ROUTED_NIC_ANNOTATION}=${nic}`]);
    await mallory([
      ...['patch', 'vm', 'evil', '--type=merge'],
      ...['-p', '{"spec":{"vm":{"virtualMachineIPAddressName":"nowhere"}}}'],
    ]);
    // And her runner credential reports the victim's address as her guest's.
    const secret = await mallory(['get', 'secret', 'vm-runner-redis', '-o', 'jsonpath={.data.url}']);
    // This bed's runner URL names its Sentinels: opened as the runners open it.
    const redis = openRedis(Buffer.from(secret, 'base64').toString());
    try {
      const pod = JSON.parse(await mallory(['get', 'pod', evilPod, '-o', 'json'])) as {
        metadata: { uid: string };
      };
      await eventually(
        async () => {
          const forged = {
            seq: 1_000_000 + (Date.now() % 1_000_000),
            runId: 'forged',
            pod: evilPod,
            podUid: pod.metadata.uid,
            phase: 'running',
            cpus: 1,
            ram: 256 * 1024 * 1024,
            drives: {},
            booted: true,
            guestAgent: { connected: true, addresses: [address] },
            updatedAt: new Date().toISOString(),
          };
          // Its write tells the managers.
          await redis.set(snapshotRedisKey(`vm:${TEAM_B}/evil`), JSON.stringify(forged));
          // The managers folded what she wrote: her status lists the address as her guest's.
          expect((await teamB.getVm('evil')).status?.ipAddresses).toContain(address);
        },
        60_000,
        1_000,
      );
    } finally {
      redis.disconnect();
    }
    // It is no address of hers, and every node still routes it to the victim.
    const after = await teamB.getVm('evil');
    expect(after.status?.ipAddress).toBeUndefined();
    await sleep(3_000); // the agents saw her VM change: a pass that would move the route has run
    expect((await routesOn(one))[address]).toBe(routesBefore[one]);
    expect((await routesOn(two))[address]).toBe(routesBefore[two]);
    await teamB.kubectl(['delete', 'vm', 'evil', '--wait=false']);
  }, 300_000);

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
