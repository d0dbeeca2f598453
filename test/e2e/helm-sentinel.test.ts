// The Helm chart with Redis Sentinel (issue 27 §1) on two real nodes: 3 Redis and 3 Sentinels
// spread over the nodes, managers and runners finding the master through the Sentinels with their
// own ACL users, and both carrying on when the master fails and a replica takes its place.
import { execFile } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Cluster } from '../../src/devenv/cluster.js';
import { testGuestManifest, type ClusterVms } from '../support/cluster-vms.js';
import { chartImageValues, helmBed } from '../support/helm-bed.js';
import { eventually } from '../support/eventually.js';

const run = promisify(execFile);
const RELEASE = 'vmop';
const RELEASE_NAMESPACE = 'vmop-system';
const VM_NAMESPACE = 'default';
const VM = 'guest';
const SET = 'vmop-redis-node';

/** The host PID of the redis-server (not the Sentinel) of the pod with `podUid`, found by its cgroup. */
async function redisServerPid(podUid: string): Promise<number> {
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8');
      // Redis sets its process title (over its environment too): `redis-server *:6379`, a
      // Sentinel's `… *:26379 [sentinel]`.
      if (!cmdline.startsWith('redis-server') || !/:6379\b/.test(cmdline)) continue;
      if ((await readFile(`/proc/${entry}/cgroup`, 'utf8')).includes(podUid)) return Number(entry);
    } catch {
      // gone meanwhile
    }
  }
  throw new Error(`no redis-server in pod ${podUid}`);
}

describe('the Helm chart with Redis Sentinel on two nodes', () => {
  let cluster: Cluster;
  let helmBinary: string;
  let vms: ClusterVms;
  let system: ClusterVms;

  /** What a Redis command answers in a pod of the set, as the Sentinels' ACL user (which may ROLE). */
  const redisCli = async (pod: string, container: 'redis' | 'sentinel', ...command: string[]) => {
    const secret = container === 'redis' ? 'sentinel-user-password' : 'sentinel-password';
    const user = container === 'redis' ? '--user vmop-sentinel' : '';
    const port = container === 'redis' ? 6379 : 26379;
    return system.kubectl([
      ...['exec', pod, '-c', container, '--', 'sh', '-c'],
      `REDISCLI_AUTH="$(cat /etc/vmop-redis/${secret})" redis-cli ${user} -p ${port} --raw ${command.join(' ')}`,
    ]);
  };
  /** The pod the Sentinels name as master (they announce pods by their DNS names). */
  const masterPod = async () =>
    (await redisCli(`${SET}-0`, 'sentinel', 'SENTINEL', 'get-master-addr-by-name', 'vmop')).split('.')[0]!;
  const role = async (pod: string) => (await redisCli(pod, 'redis', 'ROLE')).split('\n')[0];

  const bed = helmBed({ nodes: 2, vmNamespace: VM_NAMESPACE, releaseNamespace: RELEASE_NAMESPACE });
  beforeAll(() => {
    ({ cluster, helmBinary, vms, system } = bed);
  });

  it('installs 3 Redis with their Sentinels over both nodes, one master; a VM runs through it', async () => {
    await run(
      helmBinary,
      [
        ...['--kubeconfig', cluster.kubeconfigPath, 'install', RELEASE, 'helm/vmop'],
        ...['--namespace', RELEASE_NAMESPACE, '--create-namespace', ...chartImageValues(cluster)],
        ...['--set', 'redis.sentinel.enabled=true', '--wait', '--timeout', '10m'],
      ],
      { maxBuffer: 32 * 1024 * 1024 },
    );
    const pods = JSON.parse(
      await system.kubectl(['get', 'pods', '-l', 'app.kubernetes.io/component=redis', '-o', 'json']),
    ).items as Array<{ metadata: { name: string }; spec: { nodeName: string } }>;
    expect(pods.map((pod) => pod.metadata.name).sort()).toEqual([`${SET}-0`, `${SET}-1`, `${SET}-2`]);
    // Spread: both nodes hold some (soft anti-affinity: three pods, two nodes).
    expect(new Set(pods.map((pod) => pod.spec.nodeName))).toEqual(new Set(['vmop-node-1', 'vmop-node-2']));
    const master = await masterPod();
    expect(master).toMatch(new RegExp(`^${SET}-[0-2]$`));
    const roles = await Promise.all(pods.map((pod) => role(pod.metadata.name)));
    expect(roles.sort()).toEqual(['master', 'slave', 'slave']);
    // Managers and runners are given Sentinel URLs with their own users, the Sentinels' password in it.
    const secret = JSON.parse(await system.kubectl(['get', 'secret', 'vmop-redis', '-o', 'json']));
    const url = (key: string) => Buffer.from(secret.data[key], 'base64').toString();
    expect(url('url')).toMatch(
      /^redis\+sentinel:\/\/vmop-manager:\w+@vmop-redis-node-0\..*:26379,.*\/vmop\?sentinelPassword=\w+$/,
    );
    expect(url('runner-url')).toMatch(/^redis\+sentinel:\/\/vmop-runner:/);

    await vms.apply(testGuestManifest(VM, VM_NAMESPACE));
    // Booted: the runner's snapshots reached the status through the Sentinels' master.
    await vms.waitForVm(VM, (vm) => expect(vms.condition(vm, 'Booted')?.status).toBe('True'), 300_000);
  });

  it('the master frozen until the Sentinels fail it over, then SIGKILLed: managers and runners carry on with the new master, and the old one comes back as its replica', async () => {
    const old = await masterPod();
    const pid = await redisServerPid(
      await system.kubectl(['get', 'pod', old, '-o', 'jsonpath={.metadata.uid}']),
    );
    // Frozen, its connections stay open and its port answers (kubelet's probe sees nothing), as
    // a master that hangs or is cut off would: only the Sentinels, missing its replies, act.
    const frozenAt = Date.now();
    process.kill(pid, 'SIGSTOP');
    let promoted: string;
    try {
      promoted = await eventually(async () => {
        const now = await masterPod();
        expect(now).not.toBe(old);
        return now;
      }, 60_000);
    } finally {
      process.kill(pid, 'SIGKILL');
    }
    const promotedAt = Date.now();
    expect(await role(promoted)).toBe('master');
    // A change now goes through the managers (queue) and the runner (its snapshot) on the new master.
    await vms.patchVm(VM, { currentCpus: 2 });
    await vms.waitForVm(VM, (vm) => expect(vm.status?.cpus).toBe(2), 120_000);
    // For the closing note: how long the failover took here (not asserted: no timings in tests).
    console.log(
      `master frozen → promotion seen ${promotedAt - frozenAt} ms; promotion → currentCpus change in status ${Date.now() - promotedAt} ms`,
    );
    // kubelet restarts the killed Redis; it asks the Sentinels and follows the new master.
    await eventually(async () => expect(await role(old)).toBe('slave'), 120_000);
    expect(await masterPod()).toBe(promoted);
  });
});
