// The local single-node Kubernetes itself: pods run on the real kubelet with cluster DNS and
// local block volumes, and stopping it (or killing its owner) leaves nothing on the machine.
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

/** What a cluster may leave on the machine, for before/after comparisons. */
async function machineTraces(dir: string, netns: string, hostInterface: string) {
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
    if (argv.includes(dir) || cgroups.includes(`/${netns}/`))
      processes.push(`${entry} ${argv.replaceAll('\0', ' ')}`);
  }
  const cgroups = (await readdir('/sys/fs/cgroup')).filter((hierarchy) =>
    existsSync(path.join('/sys/fs/cgroup', hierarchy, netns)),
  );
  return {
    processes,
    mounts,
    loops,
    cgroups,
    netns: (await stdoutOf('ip', ['netns', 'list']))
      .split('\n')
      .filter((line) => line.startsWith(`${netns} `) || line === netns),
    interfaces: (await stdoutOf('ip', ['-o', 'link', 'show']))
      .split('\n')
      .filter((line) => line.includes(`${hostInterface}@`)),
    // The machine's own rules, CNI results and log links must be as they were.
    iptables: (await stdoutOf('iptables-save', []))
      .split('\n')
      .filter((line) => !line.startsWith('#') && !line.startsWith(':')),
    cniResults: await readdir('/var/lib/cni/results').catch(() => []),
    containerLogs: await readdir('/var/log/containers').catch(() => []),
  };
}

const nothingLeft = { processes: [], mounts: [], loops: [], cgroups: [], netns: [], interfaces: [] };

describe('the local cluster', () => {
  it('runs a pod with a block volume and cluster DNS on the real kubelet; stop() leaves nothing behind', async () => {
    const before = await machineTraces('/nonexistent', 'none', 'none');
    const cluster = await startCluster();
    const { dir, network } = cluster;
    try {
      const pods = clusterVms(cluster.kubeconfigPath, 'default');
      await pods.apply(`apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: disk}
spec: {accessModes: [ReadWriteOnce], volumeMode: Block, resources: {requests: {storage: 16Mi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: probe}
spec:
  containers:
    - name: probe
      image: ${cluster.images.runner.ref}
      imagePullPolicy: Never
      command: [sleep, infinity]
      volumeDevices: [{name: disk, devicePath: /dev/disk}]
  volumes: [{name: disk, persistentVolumeClaim: {claimName: disk}}]
`);
      await pods.kubectl(['wait', '--for=condition=Ready', 'pod/probe', '--timeout=120s']);
      const exec = (...command: string[]) => pods.kubectl(['exec', 'probe', '--', ...command]);
      expect(await exec('getent', 'hosts', 'kubernetes.default.svc.cluster.local')).toMatch(/^10\.0\.0\.1\s/);
      expect(await exec('stat', '-c', '%F %s', '/dev/disk')).toMatch(/^block special file/);
      expect(await exec('sh', '-c', 'echo data > /tmp/x && cat /tmp/x')).toBe('data\n');
      const during = await machineTraces(dir, network.netns, network.hostInterface);
      expect(during.loops.length).toBeGreaterThan(0);
      expect(during.netns).toHaveLength(1);
    } finally {
      await cluster.stop(5_000);
    }
    const after = await machineTraces(dir, network.netns, network.hostInterface);
    expect(after).toMatchObject(nothingLeft);
    expect(after.iptables).toEqual(before.iptables);
    expect(after.cniResults).toEqual(before.cniResults);
    expect(after.containerLogs).toEqual(before.containerLogs);
    expect(existsSync(dir)).toBe(false);
  });

  it('leaves nothing behind when the process that started it is killed', async () => {
    const moduleUrl = pathToFileURL(path.resolve('src/devenv/cluster.ts')).href;
    const script = `
      const { startCluster } = await import(${JSON.stringify(moduleUrl)});
      const cluster = await startCluster();
      console.log(JSON.stringify({ dir: cluster.dir, netns: cluster.network.netns, hostInterface: cluster.network.hostInterface }));
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
      const started = z
        .object({ dir: z.string(), netns: z.string(), hostInterface: z.string() })
        .parse(JSON.parse(line));
      expect(
        (await machineTraces(started.dir, started.netns, started.hostInterface)).processes.length,
      ).toBeGreaterThan(0);
      owner.kill('SIGKILL');
      await eventually(async () => {
        expect(await machineTraces(started.dir, started.netns, started.hostInterface)).toMatchObject(
          nothingLeft,
        );
        expect(existsSync(started.dir)).toBe(false);
      }, 60_000);
    } finally {
      owner.kill('SIGKILL');
    }
  });
});
