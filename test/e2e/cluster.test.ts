// The local Kubernetes itself: two real nodes whose pods reach each other and cluster DNS, node-local
// and shared block volumes, node services that come back when they die (pods untouched), and
// stopping it (or killing its owner) leaves nothing on the machine.
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { startCluster } from '../../src/devenv/cluster.js';
import { clusterVms } from '../support/cluster-vms.js';
import { eventually } from '../support/eventually.js';

const run = promisify(execFile);
/** A tool's stdout; a tool that fails fails the test (an empty answer would make the comparisons vacuous). */
const stdoutOf = async (command: string, args: string[]) => (await run(command, args)).stdout;

const Network = z.object({
  dir: z.string(),
  namespaces: z.array(z.string()),
  hostInterface: z.string(),
});
type Network = z.infer<typeof Network>;

/** What a cluster may leave on the machine, for before/after comparisons. */
async function machineTraces({ dir, namespaces, hostInterface }: Network) {
  const mounts = (await readFile('/proc/self/mountinfo', 'utf8'))
    .split('\n')
    .filter((line) => line.split(' ')[4]?.startsWith(`${dir}/`));
  const loops = (await stdoutOf('losetup', ['--list', '--noheadings', '--output', 'BACK-FILE']))
    .split('\n')
    .filter((file) => file.trim().startsWith(`${dir}/`));
  const processes: string[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const argv = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    const cgroups = await readFile(`/proc/${entry}/cgroup`, 'utf8').catch(() => '');
    if (argv.includes(dir) || namespaces.some((netns) => cgroups.includes(`/${netns}/`)))
      processes.push(`${entry} ${argv.replaceAll('\0', ' ')}`);
  }
  const cgroups = (await readdir('/sys/fs/cgroup')).flatMap((hierarchy) =>
    namespaces.filter((netns) => existsSync(path.join('/sys/fs/cgroup', hierarchy, netns))),
  );
  const listed = (await stdoutOf('ip', ['netns', 'list'])).split('\n').map((line) => line.split(' ')[0]);
  return {
    processes,
    mounts,
    loops,
    cgroups,
    netns: listed.filter((name) => namespaces.includes(name!)),
    interfaces: (await stdoutOf('ip', ['-o', 'link', 'show']))
      .split('\n')
      .filter((line) => line.includes(`${hostInterface}@`)),
    // The machine's own rules, CNI results and log links must be as they were.
    iptables: (await stdoutOf('iptables-save', []))
      .split('\n')
      .filter((line) => !line.startsWith('#') && !line.startsWith(':')),
    forwarding: (await readFile('/proc/sys/net/ipv4/ip_forward', 'utf8')).trim(),
    cniResults: await readdir('/var/lib/cni/results').catch(() => []),
    containerLogs: await readdir('/var/log/containers').catch(() => []),
  };
}

const nothingLeft = { processes: [], mounts: [], loops: [], cgroups: [], netns: [], interfaces: [] };

describe('the local cluster', () => {
  it('two nodes: pods reach pods and Services on the other node and cluster DNS; node-local and shared block volumes; a dead kubelet comes back; stop() leaves nothing behind', async () => {
    const before = await machineTraces({ dir: '/nonexistent', namespaces: ['none'], hostInterface: 'none' });
    const cluster = await startCluster({ nodes: 2 });
    const { dir, network } = cluster;
    const traces: Network = {
      dir,
      namespaces: [network.switchNetns, ...network.nodes.map((node) => node.netns)],
      hostInterface: network.hostInterface,
    };
    try {
      const pods = clusterVms(cluster.kubeconfigPath, 'default');
      const nodes = JSON.parse(await pods.kubectl(['get', 'nodes', '-o', 'json'])).items as Array<{
        metadata: { name: string; labels: Record<string, string> };
        status: { addresses: Array<{ type: string; address: string }> };
      }>;
      expect(nodes.map((n) => [n.metadata.name, n.metadata.labels['topology.kubernetes.io/zone']])).toEqual([
        ['vmop-node-1', 'zone-1'],
        ['vmop-node-2', 'zone-2'],
      ]);
      expect(nodes.map((n) => n.metadata.labels['kubernetes.io/hostname'])).toEqual([
        'vmop-node-1',
        'vmop-node-2',
      ]);

      // A pod on each node: a web server on node 1, its Service, a node-local disk on node 2 and
      // one shared disk for both.
      const podOn = (name: string, node: number, command: string, devices: string) => `---
apiVersion: v1
kind: Pod
metadata: {name: ${name}, labels: {app: ${name}}}
spec:
  nodeSelector: {kubernetes.io/hostname: vmop-node-${node}}
  containers:
    - name: probe
      image: ${cluster.images.runner.ref}
      imagePullPolicy: Never
      command: [sh, -c, ${JSON.stringify(command)}]
      volumeDevices: ${devices}
  volumes: [{name: shared, persistentVolumeClaim: {claimName: shared}}${node === 2 ? ', {name: local, persistentVolumeClaim: {claimName: local}}' : ''}]
`;
      const server = `node -e "require('http').createServer((q, r) => r.end('served by ' + require('os').hostname())).listen(8080)"`;
      await pods.apply(`apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: shared}
spec: {storageClassName: shared, accessModes: [ReadWriteMany], volumeMode: Block, resources: {requests: {storage: 16Mi}}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: local}
spec: {accessModes: [ReadWriteOnce], volumeMode: Block, resources: {requests: {storage: 16Mi}}}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {selector: {app: one}, ports: [{port: 80, targetPort: 8080}]}
${podOn('one', 1, server, '[{name: shared, devicePath: /dev/shared}]')}${podOn('two', 2, 'sleep infinity', '[{name: shared, devicePath: /dev/shared}, {name: local, devicePath: /dev/local}]')}`);
      await pods.kubectl(['wait', '--for=condition=Ready', 'pod/one', 'pod/two', '--timeout=180s']);
      const exec = (pod: string, ...command: string[]) => pods.kubectl(['exec', pod, '--', ...command]);
      const fetchFrom = (pod: string, url: string) =>
        exec(pod, 'node', '-e', `fetch(${JSON.stringify(url)}).then((r) => r.text()).then(console.log)`);
      const podIp = await pods.kubectl(['get', 'pod', 'one', '-o', 'jsonpath={.status.podIP}']);
      expect(podIp).toMatch(/^10\.244\.1\./);
      expect(await pods.kubectl(['get', 'pod', 'two', '-o', 'jsonpath={.status.podIP}'])).toMatch(
        /^10\.244\.2\./,
      );
      await eventually(async () => {
        expect(await fetchFrom('two', `http://${podIp}:8080/`)).toBe('served by one\n');
        expect(await fetchFrom('two', 'http://web.default.svc.cluster.local/')).toBe('served by one\n');
      }, 60_000);
      expect(await exec('one', 'getent', 'hosts', 'kubernetes.default.svc.cluster.local')).toMatch(
        /^10\.0\.0\.1\s/,
      );
      // The shared disk is one device for both nodes; the local one lives on node 2.
      await exec('one', 'sh', '-c', 'echo written-on-node-1 | dd of=/dev/shared conv=fsync 2>/dev/null');
      // Direct I/O (aligned): what the other node wrote, not a page cache of its own.
      expect(
        await exec(
          'two',
          'sh',
          '-c',
          'dd if=/dev/shared bs=512 count=1 iflag=direct 2>/dev/null | head -c 17',
        ),
      ).toBe('written-on-node-1');
      const volumeOf = async (claim: string) =>
        JSON.parse(
          await pods.kubectl([
            'get',
            'pv',
            await pods.kubectl(['get', 'pvc', claim, '-o', 'jsonpath={.spec.volumeName}']),
            '-o',
            'json',
          ]),
        ).spec;
      const affinity = (spec: { nodeAffinity: { required: { nodeSelectorTerms: unknown[] } } }) =>
        spec.nodeAffinity.required.nodeSelectorTerms;
      expect(affinity(await volumeOf('local'))).toEqual([
        { matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: ['vmop-node-2'] }] },
      ]);
      expect((await volumeOf('shared')).accessModes).toEqual(['ReadWriteMany']);

      // A killed kubelet is started again (as systemd would); the pods it runs are not touched.
      const kubelet = cluster.nodes[1]!.service('kubelet')!;
      const sleeper = (await stdoutOf('pgrep', ['-f', '^sleep infinity$'])).trim();
      process.kill(kubelet.pid, 'SIGKILL');
      const killedPid = kubelet.pid;
      await eventually(() => expect(kubelet.pid).not.toBe(killedPid), 30_000);
      expect(kubelet.restarts).toBe(1);
      await pods.kubectl(['wait', '--for=condition=Ready', 'node/vmop-node-2', '--timeout=60s']);
      expect((await stdoutOf('pgrep', ['-f', '^sleep infinity$'])).trim()).toBe(sleeper);
      expect(
        await pods.kubectl([
          'get',
          'pod',
          'two',
          '-o',
          'jsonpath={.status.containerStatuses[0].restartCount}',
        ]),
      ).toBe('0');

      const during = await machineTraces(traces);
      expect(during.loops.length).toBeGreaterThan(0);
      expect(during.netns).toHaveLength(3);
    } finally {
      await cluster.stop(5_000);
    }
    const after = await machineTraces(traces);
    expect(after).toMatchObject(nothingLeft);
    expect(after.iptables).toEqual(before.iptables);
    expect(after.forwarding).toEqual(before.forwarding);
    expect(after.cniResults).toEqual(before.cniResults);
    expect(after.containerLogs).toEqual(before.containerLogs);
    expect(existsSync(dir)).toBe(false);
  });

  it('leaves nothing behind when the process that started it is killed', async () => {
    const moduleUrl = pathToFileURL(path.resolve('src/devenv/cluster.ts')).href;
    const script = `
      const { startCluster } = await import(${JSON.stringify(moduleUrl)});
      const cluster = await startCluster();
      const { network } = cluster;
      console.log(JSON.stringify({
        dir: cluster.dir,
        namespaces: [network.switchNetns, ...network.nodes.map((node) => node.netns)],
        hostInterface: network.hostInterface,
      }));
      setInterval(() => {}, 1000);
    `;
    const owner = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '--eval', script], {
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    try {
      const line = await Promise.race([
        once(createInterface({ input: owner.stdout }), 'line').then(([text]) => String(text)),
        once(owner, 'exit').then(() => undefined),
      ]);
      if (line === undefined) throw new Error('the owner exited before its cluster was ready');
      const started = Network.parse(JSON.parse(line));
      expect((await machineTraces(started)).processes.length).toBeGreaterThan(0);
      owner.kill('SIGKILL');
      await eventually(async () => {
        expect(await machineTraces(started)).toMatchObject(nothingLeft);
        expect(existsSync(started.dir)).toBe(false);
      }, 60_000);
    } finally {
      owner.kill('SIGKILL');
    }
  });
});
