// A guest's ports reached as a pod's (issue 55): a VM on QEMU's user network forwards the ports it
// names from its runner pod, so a Service made by `vmop vm expose`, `kubectl port-forward` and
// `vmop vm port-forward` reach the test guest's TCP echo server, `vmop vm ssh` runs a command in it
// (the key from cloud-init's user-data), and a port it does not name is refused with what to change.
// The bed's nodes enforce NetworkPolicies (kube-router): vmop's own listeners on the runner pod
// answer no other pod, the guest's ports follow the namespace's policies as a pod's would.
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import { useDevBed } from '../support/beds.js';
import { testGuestManifest, type ClusterVms } from '../support/cluster-vms.js';
import { eventually } from '../support/eventually.js';
import { startNodePod } from '../support/tcp-stream.js';
import { startForwarding } from '../support/forwarding.js';

const run = promisify(execFile);
const NAMESPACE = 'guest-ports';
/** What a connection the enforcer drops (or rejects) ends with. */
const BLOCKED = /^(TIMEOUT|ECONNREFUSED|EHOSTUNREACH)$/;
/** Another tenant's namespace. */
const OTHER_NAMESPACE = 'guest-ports-other';
const VM = 'ported';
const READY = 'VMOP-GUEST-READY';
/** The test guest's TCP echo server. */
const ECHO_PORT = 7;

/** One line to an echo server on this machine: what came back. */
function echoLocally(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write('hello\n'));
    socket.setTimeout(20_000, () => socket.destroy(new Error('no echo within 20 s')));
    socket.on('data', (data) => {
      resolve(String(data).trim());
      socket.end();
    });
    socket.on('error', reject);
  });
}

/** Starts a forwarding command and resolves with its local port once it says "Forwarding from". */
describe("guest ports: Services and port-forwards reach a VM's guest as a pod's", () => {
  const bed = useDevBed('dev-2', { namespaces: [NAMESPACE] });
  let vms: ClusterVms;
  beforeAll(() => {
    vms = bed.vms(NAMESPACE);
  });
  const vmop = (...args: string[]) =>
    run('bin/vmop', ['vm', ...args, '-n', NAMESPACE], { env: bed.env(NAMESPACE) });

  it('a Service made by `vmop vm expose`, `kubectl port-forward` and `vmop vm port-forward` reach the echo server, `vmop vm ssh` runs a command; an unnamed port is refused', async () => {
    // A key pair whose public key cloud-init's user-data names (the guest's SSH server takes it).
    const keys = await mkdtemp(join(tmpdir(), 'vmop-ssh-'));
    const identity = join(keys, 'id_ed25519');
    await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', identity]);
    const publicKey = (await readFile(`${identity}.pub`, 'utf8')).trim();
    const cloudInit = `  cloudInit:\n    userData: {ssh_authorized_keys: ['${publicKey}']}\n`;
    await vms.apply(
      testGuestManifest(VM, NAMESPACE, { extraSpec: cloudInit }).replace(
        '    networks: []\n',
        `    networks: [{user: {ports: [{port: ${ECHO_PORT}}, {port: 22}]}}]\n`,
      ),
    );
    const running = await vms.waitForVm(VM, (vm) => expect(vm.status?.phase).toBe('Running'));
    await vms.waitForConsole(VM, READY);
    const runnerPod = running.status!.runnerPod!.name;

    // A Service on another port, from a pod of the cluster, by its DNS name.
    const exposed = await vmop('expose', VM, '--port', '7007', '--target-port', String(ECHO_PORT));
    expect(exposed.stdout).toContain(`service/${VM} created`);
    await startNodePod(vms.kubectl, { name: 'caller', namespace: NAMESPACE, vmPod: runnerPod });
    const echoFromPod = () =>
      vms.kubectl([
        ...['exec', 'caller', '--', 'node', '-e'],
        `const s = require('net').connect(7007, '${VM}.${NAMESPACE}.svc.cluster.local', () => s.write('hello\\n'));
         s.setTimeout(10000, () => { console.log('TIMEOUT'); process.exit(0); });
         s.on('data', (d) => { console.log(String(d).trim()); process.exit(0); });
         s.on('error', (e) => { console.log(e.code); process.exit(0); });`,
      ]);
    await eventually(async () => expect((await echoFromPod()).trim()).toBe('hello'), 60_000, 1_000);

    // kubectl port-forward to the runner pod's port: the guest answers.
    const kubectlForward = startForwarding(
      'kubectl',
      ['port-forward', '-n', NAMESPACE, `pod/${runnerPod}`, `0:${ECHO_PORT}`],
      bed.env(NAMESPACE),
    );
    try {
      expect(await echoLocally(await kubectlForward.port)).toBe('hello');
    } finally {
      kubectlForward.stop();
    }

    // vmop vm port-forward by the VM's name.
    const vmopForward = startForwarding(
      'bin/vmop',
      ['vm', 'port-forward', VM, `0:${ECHO_PORT}`, '-n', NAMESPACE],
      bed.env(NAMESPACE),
    );
    try {
      expect(await echoLocally(await vmopForward.port)).toBe('hello');
    } finally {
      vmopForward.stop();
    }

    // vmop vm ssh runs a command in the guest.
    const ssh = await run(
      'bin/vmop',
      [
        ...['vm', 'ssh', `root@${VM}`, '-n', NAMESPACE, '-i', identity],
        ...['-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null', '-o', 'LogLevel=ERROR'],
        ...['--', 'uname', '-sn'],
      ],
      { env: bed.env(NAMESPACE) },
    );
    expect(ssh.stdout.trim()).toMatch(/^Linux /);
    await rm(keys, { recursive: true, force: true });

    // A port the VM does not forward: refused, saying what to add.
    const refused = await vmop('port-forward', VM, '2323:23').then(
      () => '',
      (err: { stderr?: string }) => err.stderr ?? '',
    );
    expect(refused).toContain(
      `${VM} does not forward its guest's TCP port 23 (it forwards ${ECHO_PORT}, 22)`,
    );
  }, 600_000);

  it("NetworkPolicies: vmop's listeners answer no other pod; a policy of the namespace closes the guest's ports to other namespaces", async () => {
    const running = await vms.waitForVm(VM, (vm) => expect(vm.status?.phase).toBe('Running'));
    const runnerPod = running.status!.runnerPod!.name;
    const podIp = (await vms.kubectl(['get', 'pod', runnerPod, '-o', 'jsonpath={.status.podIP}'])).trim();
    await vms.kubectl(['create', 'namespace', OTHER_NAMESPACE]).catch(() => undefined);
    await startNodePod(vms.kubectl, { name: 'outsider', namespace: OTHER_NAMESPACE, vmPod: runnerPod });
    /** What a TCP connection from `pod` to the runner pod's `port` gets: the echo, CONNECTED, or why not. */
    const probe = async (pod: string, namespace: string, port: number) =>
      (
        await vms.kubectl([
          ...['exec', '-n', namespace, pod, '--', 'node', '-e'],
          `const s = require('net').connect(${port}, '${podIp}', () => { s.write('hello\\n'); setTimeout(() => { console.log('CONNECTED'); process.exit(0); }, 2000); });
           s.setTimeout(4000, () => { console.log('TIMEOUT'); process.exit(0); });
           s.on('data', (d) => { console.log(String(d).trim()); process.exit(0); });
           s.on('error', (e) => { console.log(e.code); process.exit(0); });`,
        ])
      ).trim();
    // The node's own traffic to its pods passes any policy (kubelet's probes): the listener is
    // there, so what the other pods get is the policy's doing.
    const node = (await vms.kubectl(['get', 'pod', runnerPod, '-o', 'jsonpath={.spec.nodeName}'])).trim();
    const nodeNetns = bed.state().nodeServices.find((n) => n.node === node)!.netns;
    const metricsFromNode = async () =>
      (
        await run('nsenter', [
          `--net=${nodeNetns}`,
          '--',
          ...[
            process.execPath,
            '-e',
            `fetch('http://${podIp}:9110/metrics').then((r) => console.log(r.status))`,
          ],
        ])
      ).stdout.trim();

    // Without a policy of the namespace: the guest's port answers everyone, the runner's metrics
    // no other pod (only the VM's own, the managers' address and the nodes').
    expect(await probe('outsider', OTHER_NAMESPACE, ECHO_PORT)).toBe('hello');
    expect(await probe('caller', NAMESPACE, ECHO_PORT)).toBe('hello');
    expect(await probe('outsider', OTHER_NAMESPACE, 9110)).toMatch(BLOCKED);
    expect(await probe('caller', NAMESPACE, 9110)).toMatch(BLOCKED);
    expect(await metricsFromNode()).toBe('200');

    // The namespace's own pods only: the other namespace's pod no longer reaches the guest.
    const sameNamespaceOnly = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: same-namespace-only, namespace: ${NAMESPACE}}
spec:
  podSelector: {}
  ingress: [{from: [{podSelector: {}}]}]
`;
    await vms.kubectl(['apply', '-f', '-'], sameNamespaceOnly);
    await eventually(
      async () => expect(await probe('outsider', OTHER_NAMESPACE, ECHO_PORT)).toMatch(BLOCKED),
      60_000,
      1_000,
    );
    expect(await probe('caller', NAMESPACE, ECHO_PORT)).toBe('hello');
    // vmop's listeners stay as they were to the node. (NetworkPolicies add up: the namespace's
    // policy now opens them to its own pods; it could never close them to the managers.)
    expect(await metricsFromNode()).toBe('200');
    const policy = JSON.parse(await vms.kubectl(['get', 'networkpolicy', `vmop-runner-${VM}`, '-o', 'json']));
    expect(policy.spec.ingress.filter((rule: { from?: unknown }) => rule.from === undefined)).toEqual([]);

    // The policy gone, the guest's port is everyone's again.
    await vms.kubectl(['delete', 'networkpolicy', 'same-namespace-only']);
    await eventually(
      async () => expect(await probe('outsider', OTHER_NAMESPACE, ECHO_PORT)).toBe('hello'),
      60_000,
      1_000,
    );
    expect(await probe('outsider', OTHER_NAMESPACE, 9110)).toMatch(BLOCKED);
  }, 300_000);
});
