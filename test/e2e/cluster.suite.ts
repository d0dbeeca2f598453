// The local Kubernetes itself: two real nodes whose pods reach each other and cluster DNS, node-local
// and shared block volumes, node services that come back when they die (pods untouched). That
// stopping it (or killing its owner) leaves nothing on the machine is checked whenever a test bed
// stops (test/support/beds.ts): the cluster bed by killing its owner, the `vmop dev` beds by
// `vmop dev down`.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { useClusterBed } from '../support/beds.js';
import { eventually } from '../support/eventually.js';
import { signalRecorded } from '../support/qemu-process.js';

const run = promisify(execFile);
/** A tool's stdout; a tool that fails fails the test (an empty answer would make the comparisons vacuous). */
const stdoutOf = async (command: string, args: string[]) => (await run(command, args)).stdout;

const NAMESPACE = 'cluster';

describe('the local cluster', () => {
  const bed = useClusterBed({ namespaces: [NAMESPACE] });

  it('two nodes: pods reach pods and Services on the other node and cluster DNS; node-local and shared block volumes; a dead kubelet comes back', async () => {
    const pods = bed.vms(NAMESPACE);
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
  # As the suite's namespace requires (Pod Security "restricted"); the block devices become the user's.
  securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: probe
      image: ${bed.state().images.runner}
      imagePullPolicy: Never
      command: [sh, -c, ${JSON.stringify(command)}]
      volumeDevices: ${devices}
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
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
      expect(await fetchFrom('two', `http://web.${NAMESPACE}.svc.cluster.local/`)).toBe('served by one\n');
    }, 60_000);
    expect(await exec('one', 'getent', 'hosts', 'kubernetes.default.svc.cluster.local')).toMatch(
      /^10\.0\.0\.1\s/,
    );
    // The shared disk is one device for both nodes; the local one lives on node 2.
    await exec('one', 'sh', '-c', 'echo written-on-node-1 | dd of=/dev/shared conv=fsync 2>/dev/null');
    // Direct I/O (aligned): what the other node wrote, not a page cache of its own.
    expect(
      await exec('two', 'sh', '-c', 'dd if=/dev/shared bs=512 count=1 iflag=direct 2>/dev/null | head -c 17'),
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
    const kubelet = () => bed.state().nodes[1]!.services.find((service) => service.name === 'kubelet')!;
    const sleeper = (await stdoutOf('pgrep', ['-f', '^sleep infinity$'])).trim();
    const killed = kubelet();
    signalRecorded(killed);
    await eventually(() => expect(kubelet().startTime).not.toBe(killed.startTime), 30_000);
    expect(kubelet().restarts).toBe(killed.restarts + 1);
    await pods.kubectl(['wait', '--for=condition=Ready', 'node/vmop-node-2', '--timeout=60s']);
    expect((await stdoutOf('pgrep', ['-f', '^sleep infinity$'])).trim()).toBe(sleeper);
    expect(
      await pods.kubectl(['get', 'pod', 'two', '-o', 'jsonpath={.status.containerStatuses[0].restartCount}']),
    ).toBe('0');
  });
});
