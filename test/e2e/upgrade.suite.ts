// An upgrade from vmop 0.1, which ran each VM from a StatefulSet: a VM running in `<vm>-0`
// with data on its disk goes on running in that very pod and qemu when today's managers take over
// (the StatefulSet goes, its pod is adopted), and after a restart its new pod uses the same claims,
// so the data written before is read after.
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { VirtualMachine } from '../../src/api/virtual-machine.js';
import { applyObjects } from '../../src/devenv/cluster.js';
import { installCrds } from '../../src/devenv/install-crds.js';
import { startRedis, type RedisServer } from '../../src/devenv/redis.js';
import { desiredConfigMap } from '../../src/reconcilers/virtual-machine/runner-config/config-map.js';
import {
  desiredRunnerConfig,
  renderRunnerConfig,
} from '../../src/reconcilers/virtual-machine/runner-config/config.js';
import {
  desiredRunnerSecret,
  desiredRunnerServiceAccount,
} from '../../src/reconcilers/virtual-machine/runner-config/identity.js';
import { useClusterBed } from '../support/beds.js';
import { testGuestManifest, type ClusterVms } from '../support/cluster-vms.js';
import { eventually } from '../support/eventually.js';
import { legacyStatefulSet } from '../support/legacy-layout.js';
import { startManagerProcess, type ManagerProcess } from '../support/manager-process.js';
import { qemuProcess } from '../support/qemu-process.js';

const run = promisify(execFile);
const NAMESPACE = 'upgrade';
const VM = 'upgrade';
const READY = 'VMOP-GUEST-READY';

describe('upgrade from the StatefulSet layout of vmop 0.1', () => {
  const bed = useClusterBed({ namespaces: [NAMESPACE] });
  const kubeConfig = new KubeConfig();
  let redis: RedisServer;
  let vms: ClusterVms;
  const managers: ManagerProcess[] = [];
  const data = `written-before-the-upgrade-${process.pid}`;
  const readDisk = `dd if=/dev/vda bs=512 count=1 2>/dev/null | head -c ${data.length}; echo`;

  /** The qemu of the VM on the node that runs it. */
  const vmQemu = async () => {
    const node = await vms.kubectl(['get', 'pod', `${VM}-0`, '-o', 'jsonpath={.spec.nodeName}']);
    return qemuProcess(VM, bed.state().nodes.find((n) => n.name === node)!.cgroupRoot);
  };

  beforeAll(async () => {
    kubeConfig.loadFromFile(bed.kubeconfig);
    vms = bed.vms(NAMESPACE);
    await installCrds(kubeConfig);
    redis = await startRedis({ host: bed.state().hostAddress });
  }, 1_800_000);

  // Before the bed deletes the namespace: no manager of this file acts on it any more.
  afterAll(async () => {
    for (const manager of managers) await manager.stop();
    await redis?.stop();
  }, 300_000);

  it("a VM running in vmop 0.1's StatefulSet pod writes to its disk", async () => {
    // What vmop 0.1 made for it: the runners' identity, its ConfigMap and StatefulSet.
    await vms.apply(
      testGuestManifest(VM, NAMESPACE).replace(
        '    networks: []\n',
        '    networks: []\n    disks:\n    - volumeClaimTemplate:\n        metadata: {name: data}\n        spec: {resources: {requests: {storage: 16Mi}}}\n',
      ),
    );
    const vm = VirtualMachine.parse(parse(await vms.kubectl(['get', 'vm', VM, '-o', 'yaml'])));
    const config = renderRunnerConfig(desiredRunnerConfig(vm, { hasDisplaySecret: false }));
    await applyObjects(kubeConfig, [
      desiredRunnerServiceAccount(NAMESPACE),
      desiredRunnerSecret(NAMESPACE, { runner: redis.url, importer: redis.url }),
      desiredConfigMap(vm, config.yaml),
      legacyStatefulSet(vm, {
        runnerImage: { image: bed.state().images.runner, pullPolicy: 'Never' },
        hasImageRepository: true,
      }) as never,
    ]);
    // `kubectl wait` fails at once on a pod the StatefulSet controller has not made yet.
    await eventually(() => vms.kubectl(['get', 'pod', `${VM}-0`]), 60_000);
    await vms.kubectl(['wait', '--for=condition=Ready', `pod/${VM}-0`, '--timeout=180s']);
    await vms.waitForConsole(VM, READY);
    await vms.typeOnConsole(VM, `echo ${data} | dd of=/dev/vda conv=fsync 2>/dev/null; ${readDisk}`);
    await vms.waitForConsole(VM, `${data}\r`);
    expect(await vms.kubectl(['get', 'pvc', '-o', 'name'])).toMatch(
      /runner-data-upgrade-0[\s\S]*data-disk-upgrade-0|data-disk-upgrade-0[\s\S]*runner-data-upgrade-0/,
    );
  });

  it("today's managers take over: the StatefulSet goes, the VM runs on in the same pod and qemu", async () => {
    const podBefore = JSON.parse(await vms.kubectl(['get', 'pod', `${VM}-0`, '-o', 'json']));
    const qemuBefore = await vmQemu();
    expect(qemuBefore).toBeDefined();
    for (let replica = 0; replica < 2; replica++) {
      managers.push(
        startManagerProcess(
          [
            ...['--kubeconfig', bed.kubeconfig, '--redis', redis.url],
            ...['--runner-image', bed.state().images.runner, '--runner-image-pull-policy', 'Never'],
            // No node agent here gives /dev/kvm (the chart's runs only where the chart is installed).
            '--no-kvm',
          ],
          { logLevel: 'info' },
        ),
      );
    }
    await Promise.all(managers.map((m) => m.waitForLog((l) => l.msg === 'manager started')));
    await eventually(
      () => expect(vms.kubectl(['get', 'statefulset', VM])).rejects.toThrow(/NotFound/),
      60_000,
    );
    const vm = await vms.waitForVm(VM, (vm) => {
      expect(vm.status?.phase).toBe('Running');
      expect(vm.status?.runnerPod).toMatchObject({ name: `${VM}-0`, uid: podBefore.metadata.uid });
    });
    expect(vm.status?.runnerRestarts).toBe(0);
    const podAfter = JSON.parse(await vms.kubectl(['get', 'pod', `${VM}-0`, '-o', 'json']));
    expect(podAfter.metadata.uid).toBe(podBefore.metadata.uid);
    expect(podAfter.metadata.ownerReferences).toEqual([
      expect.objectContaining({ kind: 'VirtualMachine', name: VM, controller: true }),
    ]);
    expect(podAfter.status.containerStatuses[0].restartCount).toBe(0);
    expect(await vmQemu()).toEqual(qemuBefore);
  });

  it('after a restart, the new pod uses the claims of before: the data is there', async () => {
    const { stdout } = await run(path.resolve('bin/vmop'), ['vm', 'restart', VM, '-n', NAMESPACE, '--wait'], {
      env: { ...process.env, KUBECONFIG: bed.kubeconfig },
    });
    expect(stdout).toMatch(/Completed \(the VM runs again, in a new runner pod/);
    const vm = await vms.waitForVm(VM, (vm) => {
      expect(vm.status?.runnerPod?.name).toBe(VM);
      expect(vms.condition(vm, 'Booted')?.status).toBe('True');
    });
    const pod = JSON.parse(await vms.kubectl(['get', 'pod', vm.status!.runnerPod!.name, '-o', 'json']));
    const claims = pod.spec.volumes
      .filter((v: { persistentVolumeClaim?: object }) => v.persistentVolumeClaim)
      .map((v: { persistentVolumeClaim: { claimName: string } }) => v.persistentVolumeClaim.claimName)
      .sort();
    expect(claims).toEqual(['data-disk-upgrade-0', 'runner-data-upgrade-0', 'vmop-image-repository']);
    await vms.waitForConsole(VM, READY);
    await vms.typeOnConsole(VM, readDisk);
    await vms.waitForConsole(VM, `${data}\r`);
    // No claim of the new naming was made beside them.
    expect(await vms.kubectl(['get', 'pvc', '-o', 'name'])).not.toMatch(
      /upgrade-data-disk|upgrade-runner-data/,
    );
  });
});
