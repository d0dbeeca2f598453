// Tenancy (issue 40): dora may `edit` in team-b only (kubectl --as dora, as the apiserver would
// name her) and tries to reach team-a's VM with what team-b gives her: her namespace's Redis
// credentials and a pod of her own. Each attempt is refused or harmless, shown by what she then
// cannot do. Elsewhere: runner pods unprivileged on the pod network (lifecycle), runner images
// and tap networks refused (start-and-provisioning, helm), imports of the cluster's endpoints
// refused (imports), consoles ending with the login or permission and the login flood (web).
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { snapshotRedisKey } from '../../src/api/runner-snapshot.js';
import { attachPodName, NBD_PORT } from '../../src/reconcilers/virtual-machine/disks/attach-pod.js';
import { RUNNER_METRICS_PORT } from '../../src/reconcilers/virtual-machine/runner-pod/pod.js';
import { useDevBed } from '../support/beds.js';
import { eventually } from '../support/eventually.js';
import { testGuestManifest, type ClusterVms } from '../support/cluster-vms.js';
import { SPICE_LINK_OK, SPICE_LINK_PERMISSION_DENIED } from '../support/spice-login.js';
import { spiceLoginFrom } from '../support/spice-login-from.js';

const run = promisify(execFile);
const TEAM_A = 'tenancy-team-a';
const TEAM_B = 'tenancy-team-b';
const VM = 'web';
const SPICE_PORT = 5930;
/** A sleep no other process on the machine runs: how the test finds dora's pod's processes. */
const DORA_SLEEP = '3600.4040';
/** `node -e CONNECT_PROBE host port`: CONNECTED, TIMEOUT (4 s) or the connection's error code. */
const CONNECT_PROBE = `const s = require('net').connect(Number(process.argv[2]), process.argv[1], () => { console.log('CONNECTED'); process.exit(0); });
s.setTimeout(4000, () => { console.log('TIMEOUT'); process.exit(0); });
s.on('error', (e) => { console.log(e.code); process.exit(0); });`;
/** `node -e LISTENING_PORTS`: the TCP ports a pod listens on, on any address but loopback. */
const LISTENING_PORTS = `const fs = require('fs');
const ports = new Set();
for (const file of ['/proc/net/tcp', '/proc/net/tcp6'])
  for (const line of fs.readFileSync(file, 'utf8').split('\\n').slice(1)) {
    const [local, , state] = line.trim().split(/\\s+/).slice(1, 4);
    if (state !== '0A') continue;
    const [address, port] = local.split(':');
    if (!/7F$|^0{24}01000000$/.test(address)) ports.add(parseInt(port, 16));
  }
console.log([...ports].join(' '));`;
/** What a connection the enforcer drops (or rejects) ends with. */
const BLOCKED = /^(TIMEOUT|ECONNREFUSED|EHOSTUNREACH)$/;

describe('tenancy: a person with edit in one namespace cannot reach another', () => {
  const bed = useDevBed('dev', { namespaces: [TEAM_A, TEAM_B] });
  let teamA: ClusterVms;
  let teamB: ClusterVms;
  const redisClients: Redis[] = [];
  /** kubectl as dora. */
  const dora = (...args: string[]) => teamB.kubectl(['--as', 'dora', ...args]);
  const secretValue = async (as: (...args: string[]) => Promise<string>, secret: string, key: string) =>
    Buffer.from(
      await as('get', 'secret', secret, '-o', `jsonpath={.data.${key.replace(/\./g, '\\.')}}`),
      'base64',
    ).toString();

  beforeAll(async () => {
    teamA = bed.vms(TEAM_A);
    teamB = bed.vms(TEAM_B);
    await teamB.kubectl(['create', 'rolebinding', 'dora-edit', '--clusterrole=edit', '--user=dora']);
    // A VM of team-a with a SPICE display (its password generated into a Secret), and a stopped
    // one of team-b: team-b gets its runner Secret from it.
    await teamA.apply(testGuestManifest(VM, TEAM_A, { spicePort: SPICE_PORT }));
    await teamB.apply(testGuestManifest('own', TEAM_B).replace('state: Running', 'state: Stopped'));
    await teamA.waitForVm(VM, (vm) => expect(teamA.condition(vm, 'Booted')?.status).toBe('True'));
    await eventually(() => secretValue(dora, 'vm-runner-redis', 'url'));
  }, 300_000);

  afterAll(async () => {
    for (const client of redisClients) client.disconnect();
  });

  /** Her pod, as `restricted` admits it, with the runner image (one the nodes have): its network namespace. */
  let doraPod: Promise<string> | undefined;
  const doraNetns = () =>
    (doraPod ??= (async () => {
      await dora(
        'run',
        'probe',
        '--image',
        bed.state().cluster.runnerImage,
        '--image-pull-policy',
        'Never',
        '--restart',
        'Never',
        '--overrides',
        JSON.stringify({
          spec: {
            securityContext: {
              runAsNonRoot: true,
              runAsUser: 65532,
              seccompProfile: { type: 'RuntimeDefault' },
            },
            containers: [
              {
                name: 'probe',
                image: bed.state().cluster.runnerImage,
                imagePullPolicy: 'Never',
                command: ['sleep', DORA_SLEEP],
                securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } },
              },
            ],
          },
        }),
      );
      await dora('wait', '--for=condition=Ready', 'pod/probe', '--timeout=120s');
      const { stdout: pids } = await run('pgrep', ['-f', `sleep ${DORA_SLEEP}`]);
      return `/proc/${pids.trim().split('\n')[0]}/ns/net`;
    })());
  /** What a TCP connection from her pod to `host:port` gets: CONNECTED, TIMEOUT or the error's code. */
  const connectFromDora = async (host: string, port: number) =>
    (
      await run('nsenter', [
        `--net=${await doraNetns()}`,
        '--',
        ...[process.execPath, '-e', CONNECT_PROBE, host, String(port)],
      ])
    ).stdout.trim();

  const redisAs = (url: string) => {
    const client = new Redis(url, { maxRetriesPerRequest: 0 });
    client.on('error', () => undefined); // a refused write drops the connection: the command says so
    redisClients.push(client);
    return (command: string, ...args: string[]) =>
      client.call(command, ...args).then(
        () => 'OK',
        (err: Error) => err.message,
      );
  };

  it("cannot write team-a's VM status through Redis with team-b's runner or importer credential", async () => {
    // She reads team-b's Secrets (edit may), none of team-a's: not its runner credential, display
    // password or migration key.
    expect(await dora('auth', 'can-i', 'get', 'secrets').then((s) => s.trim())).toBe('yes');
    expect(
      await teamA
        .kubectl(['--as', 'dora', 'auth', 'can-i', 'get', 'secrets'])
        .catch((err: { stdout: string }) => err.stdout),
    ).toMatch(/^no/);
    await expect(teamA.kubectl(['--as', 'dora', 'get', 'secret', 'vm-runner-redis'])).rejects.toThrow(
      /Forbidden/,
    );
    const before = await teamA.getVm(VM);
    for (const key of ['url', 'importer-url']) {
      const asDora = redisAs(await secretValue(dora, 'vm-runner-redis', key));
      const forged = JSON.stringify({
        seq: 1e9,
        runId: 'forged',
        phase: 'stopped',
        cpus: 2,
        ram: 1,
        drives: {},
      });
      for (const [command, ...args] of [
        ['SET', snapshotRedisKey(`vm:${TEAM_A}/${VM}`), forged],
        ['XADD', `vmop:events:${TEAM_A}`, '*', 'key', `vm:${TEAM_A}/${VM}`, 'event', '{}'],
        ['XADD', 'bull:vmop:events', '*', 'event', 'added'],
        ['SCAN', '0'],
      ])
        expect(`${key}: ${command}: ${await asDora(command!, ...args)}`).toMatch(/: NOPERM/);
    }
    // Nor any key of her own namespace but those of the runner pods vmop made there: her VM
    // `own` is stopped, so none; a stream or a key of her choosing, neither.
    const asRunner = redisAs(await secretValue(dora, 'vm-runner-redis', 'url'));
    for (const [command, ...args] of [
      ['SET', snapshotRedisKey(`vm:${TEAM_B}/own`), '{}'],
      ['SET', snapshotRedisKey(`vm:${TEAM_B}/pad1`), '{}'],
      ['XADD', `vmop:events:${TEAM_B}`, '*', 'key', `vm:${TEAM_A}/${VM}`, 'event', '{}'],
    ])
      expect(`${command}: ${await asRunner(command!, ...args)}`).toMatch(/: NOPERM/);
    const after = await teamA.getVm(VM);
    expect(after.status?.phase ?? after.status).toEqual(before.status?.phase ?? before.status);
    expect(teamA.condition(after, 'Booted')?.status).toBe('True');
  });

  it('cannot write a value larger than 1 MB into the shared Redis, nor keys of her choosing; Redis stays up', async () => {
    const url = await secretValue(dora, 'vm-runner-redis', 'url');
    const key = snapshotRedisKey(`vm:${TEAM_B}/pad`);
    const managers = new Redis(bed.state().redisUrl, { maxRetriesPerRequest: 1 });
    redisClients.push(managers);
    // Stop 57's attack wrote 50 MB under a snapshot key of her choosing, and could have written
    // as many such keys as she liked: 2 MB is refused before Redis reads the key (it drops the
    // connection that sends it), 512 KB under a key no pod vmop made has is refused too.
    // (Refused for its size, not its key: Redis' 'Protocol error', or the dropped connection's.)
    expect(await redisAs(url)('SET', key, 'x'.repeat(2 * 1024 * 1024))).not.toMatch(/^OK$|NOPERM/);
    expect(await redisAs(url)('SET', key, 'x'.repeat(512 * 1024))).toMatch(/NOPERM/);
    expect(await managers.strlen(key)).toBe(0);
    expect(await managers.ping()).toBe('PONG');
  });

  it("cannot reach team-a's SPICE display from a pod of team-b (vmop's NetworkPolicy), nor read its password", async () => {
    await expect(teamA.kubectl(['--as', 'dora', 'get', 'secret', `${VM}-display-secret`])).rejects.toThrow(
      /Forbidden/,
    );
    const runnerPod = (await teamA.getVm(VM)).status!.runnerPod!.name;
    const [podIP, node] = (
      await teamA.kubectl(['get', 'pod', runnerPod, '-o', 'jsonpath={.status.podIP} {.spec.nodeName}'])
    ).split(' ');
    // A TCP connection from her pod's network: dropped (or refused) by the node's enforcer.
    expect(await connectFromDora(podIP!, SPICE_PORT)).toMatch(BLOCKED);
    // The display listens, and its password guards it where the network lets one in (a viewer on
    // the VM's node: the node's own traffic to its pods passes).
    const nodeNetns = bed.state().nodeServices.find((n) => n.node === node)!.netns;
    const login = (password: string) => spiceLoginFrom(nodeNetns, podIP!, SPICE_PORT, password);
    expect(await login('guessed')).toBe(SPICE_LINK_PERMISSION_DENIED);
    const password = 'team-a-only';
    await teamA.setDisplayPassword(VM, password);
    expect(await login(password)).toBe(SPICE_LINK_OK);
  });

  it("cannot open a TCP connection to any listener of team-a's runner pod, nor to the NBD export of a disk attached at runtime", async () => {
    const runnerPod = (await teamA.getVm(VM)).status!.runnerPod!.name;
    const podIP = (await teamA.kubectl(['get', 'pod', runnerPod, '-o', 'jsonpath={.status.podIP}'])).trim();
    // Every port the pod listens on beyond its loopback, as its own network namespace says: the
    // runner's metrics and readiness, SPICE, and whatever else the runner or QEMU opens.
    const listening = (await teamA.kubectl(['exec', runnerPod, '--', 'node', '-e', LISTENING_PORTS]))
      .trim()
      .split(/\s+/)
      .map(Number);
    expect(listening).toEqual(expect.arrayContaining([RUNNER_METRICS_PORT, SPICE_PORT]));
    for (const port of listening)
      expect({ port, reached: await connectFromDora(podIP, port) }).toEqual({
        port,
        reached: expect.stringMatching(BLOCKED),
      });

    // A disk attached while the VM runs is served by a pod of its own over NBD: its QEMU attaches
    // it (so the runner reaches the export), her pod does not reach it.
    await teamA.kubectl([
      ...['patch', 'vm', VM, '--type', 'json', '-p'],
      JSON.stringify([
        {
          op: 'add',
          path: '/spec/vm/disks',
          value: [
            {
              volumeClaimTemplate: {
                metadata: { name: 'extra' },
                spec: { resources: { requests: { storage: '16Mi' } } },
              },
            },
          ],
        },
      ]),
    ]);
    await teamA.waitForVm(VM, (vm) =>
      expect(vm.status?.disks?.find((disk) => disk.name === 'extra-disk')?.attachment?.phase).toBe(
        'Attached',
      ),
    );
    const exportPod = attachPodName(VM, 'extra-disk');
    const exportIP = (
      await teamA.kubectl(['get', 'pod', exportPod, '-o', 'jsonpath={.status.podIP}'])
    ).trim();
    expect(await connectFromDora(exportIP, NBD_PORT)).toMatch(BLOCKED);
  }, 600_000);
});
