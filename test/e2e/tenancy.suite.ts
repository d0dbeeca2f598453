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
    // Her pod, as `restricted` admits it, with the runner image (one the nodes have).
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
    const netns = `/proc/${pids.trim().split('\n')[0]}/ns/net`;
    const runnerPod = (await teamA.getVm(VM)).status!.runnerPod!.name;
    const [podIP, node] = (
      await teamA.kubectl(['get', 'pod', runnerPod, '-o', 'jsonpath={.status.podIP} {.spec.nodeName}'])
    ).split(' ');
    // A TCP connection from her pod's network: dropped (or refused) by the node's enforcer.
    const { stdout: reached } = await run('nsenter', [
      `--net=${netns}`,
      '--',
      ...[process.execPath, '-e', CONNECT_PROBE, podIP!, String(SPICE_PORT)],
    ]);
    expect(reached.trim()).toMatch(/^(TIMEOUT|ECONNREFUSED|EHOSTUNREACH)$/);
    // The display listens, and its password guards it where the network lets one in (a viewer on
    // the VM's node: the node's own traffic to its pods passes).
    const nodeNetns = bed.state().nodeServices.find((n) => n.node === node)!.netns;
    const login = (password: string) => spiceLoginFrom(nodeNetns, podIP!, SPICE_PORT, password);
    expect(await login('guessed')).toBe(SPICE_LINK_PERMISSION_DENIED);
    const password = 'team-a-only';
    await teamA.setDisplayPassword(VM, password);
    expect(await login(password)).toBe(SPICE_LINK_OK);
  });
});
