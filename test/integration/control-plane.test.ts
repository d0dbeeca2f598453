import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, symlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import {
  ApiextensionsV1Api,
  AppsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  VersionApi,
  type V1CustomResourceDefinition,
} from '@kubernetes/client-node';
import { z } from 'zod';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startControlPlane } from '../../src/devenv/control-plane.js';
import { locateControlPlaneBinaries } from '../../src/devenv/kube-binaries.js';
import { bystanderWithPid, type Bystander } from '../support/recycled-pid.js';
import {
  createTestNamespace,
  isNotFound,
  kubectl,
  sharedKubeConfig,
  type TestNamespace,
} from '../support/kube.js';

const waitLong = { timeout: 60_000, interval: 250 };

describe('shared control plane', () => {
  const kubeConfig = sharedKubeConfig();
  const core = kubeConfig.makeApiClient(CoreV1Api);
  let namespace: TestNamespace;
  beforeAll(async () => {
    namespace = await createTestNamespace(kubeConfig, 'control-plane');
  });
  afterAll(async () => {
    await namespace?.cleanup();
  });

  it('reports a stamped Kubernetes 1.34 version', async () => {
    const version = await kubeConfig.makeApiClient(VersionApi).getCode();
    expect(version.gitVersion).toMatch(/^v1\.34\.\d+$/);
    expect(version.major).toBe('1');
    expect(version.minor).toBe('34');
  });

  it('serves a CRD created with kubectl, and its objects through kubectl', async () => {
    const group = `${namespace.name}.kubectl.vmop.test`;
    await kubectl(['apply', '-f', '-'], JSON.stringify(crd(group, 'Widget', 'widgets')));
    try {
      await kubectl(['wait', '--for=condition=Established', `crd/widgets.${group}`, '--timeout=60s']);
      await kubectl(
        ['apply', '-n', namespace.name, '-f', '-'],
        JSON.stringify({
          apiVersion: `${group}/v1`,
          kind: 'Widget',
          metadata: { name: 'w1' },
          spec: { size: 3 },
        }),
      );
      const listed = JSON.parse(
        await kubectl(['get', `widgets.${group}`, '-n', namespace.name, '-o', 'json']),
      ) as {
        items: Array<{ metadata: { name: string }; spec: { size: number } }>;
      };
      expect(listed.items.map((item) => [item.metadata.name, item.spec.size])).toEqual([['w1', 3]]);
    } finally {
      await kubectl(['delete', 'crd', `widgets.${group}`, '--wait=false', '--ignore-not-found']);
    }
  });

  it('serves a CRD created with client-node, validating its objects against the schema', async () => {
    const group = `${namespace.name}.client.vmop.test`;
    const extensions = kubeConfig.makeApiClient(ApiextensionsV1Api);
    const objects = kubeConfig.makeApiClient(CustomObjectsApi);
    const name = `gadgets.${group}`;
    await extensions.createCustomResourceDefinition({ body: crd(group, 'Gadget', 'gadgets') });
    try {
      await vi.waitFor(async () => {
        const conditions = (await extensions.readCustomResourceDefinition({ name })).status?.conditions ?? [];
        expect(conditions).toContainEqual(expect.objectContaining({ type: 'Established', status: 'True' }));
      }, waitLong);
      const target = { group, version: 'v1', namespace: namespace.name, plural: 'gadgets' };
      await objects.createNamespacedCustomObject({
        ...target,
        body: { apiVersion: `${group}/v1`, kind: 'Gadget', metadata: { name: 'g1' }, spec: { size: 5 } },
      });
      const read = (await objects.getNamespacedCustomObject({ ...target, name: 'g1' })) as {
        spec: { size: number };
      };
      expect(read.spec.size).toBe(5);
      const invalid = objects.createNamespacedCustomObject({
        ...target,
        body: { apiVersion: `${group}/v1`, kind: 'Gadget', metadata: { name: 'g2' }, spec: { size: 'big' } },
      });
      await expect(invalid).rejects.toMatchObject({ code: 422 });
    } finally {
      await extensions.deleteCustomResourceDefinition({ name });
    }
  });

  it('gives a StatefulSet its PVC data-<name>-0 and pod <name>-0 (kube-controller-manager)', async () => {
    const apps = kubeConfig.makeApiClient(AppsV1Api);
    const labels = { app: 'web' };
    await apps.createNamespacedStatefulSet({
      namespace: namespace.name,
      body: {
        metadata: { name: 'web' },
        spec: {
          replicas: 1,
          serviceName: 'web',
          selector: { matchLabels: labels },
          template: {
            metadata: { labels },
            spec: {
              containers: [
                { name: 'main', image: 'busybox', volumeMounts: [{ name: 'data', mountPath: '/data' }] },
              ],
            },
          },
          volumeClaimTemplates: [
            {
              metadata: { name: 'data' },
              spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } },
            },
          ],
        },
      },
    });
    const pvc = await vi.waitFor(
      () => core.readNamespacedPersistentVolumeClaim({ namespace: namespace.name, name: 'data-web-0' }),
      waitLong,
    );
    expect(pvc.spec?.resources?.requests?.storage).toBe('1Gi');
    const pod = await vi.waitFor(
      () => core.readNamespacedPod({ namespace: namespace.name, name: 'web-0' }),
      waitLong,
    );
    expect(pod.metadata?.ownerReferences?.map((owner) => [owner.kind, owner.name])).toEqual([
      ['StatefulSet', 'web'],
    ]);
    expect(pod.spec?.volumes).toContainEqual(
      expect.objectContaining({ name: 'data', persistentVolumeClaim: { claimName: 'data-web-0' } }),
    );
    // A scheduler, but no node: the pod is never bound, and the scheduler says why.
    await vi.waitFor(async () => {
      const current = await core.readNamespacedPod({ namespace: namespace.name, name: 'web-0' });
      expect(current.spec?.nodeName).toBeUndefined();
      expect(current.status?.phase).toBe('Pending');
      expect(current.status?.conditions).toContainEqual(
        expect.objectContaining({ type: 'PodScheduled', status: 'False', reason: 'Unschedulable' }),
      );
    }, waitLong);
  });

  it('garbage-collects an owned ConfigMap when its owner is deleted', async () => {
    const ns = namespace.name;
    const owner = await core.createNamespacedConfigMap({
      namespace: ns,
      body: { metadata: { name: 'owner' } },
    });
    await core.createNamespacedConfigMap({
      namespace: ns,
      body: {
        metadata: {
          name: 'owned',
          ownerReferences: [
            { apiVersion: 'v1', kind: 'ConfigMap', name: 'owner', uid: owner.metadata!.uid! },
          ],
        },
      },
    });
    await core.deleteNamespacedConfigMap({ namespace: ns, name: 'owner' });
    await vi.waitFor(async () => {
      const gone = await core.readNamespacedConfigMap({ namespace: ns, name: 'owned' }).then(
        () => false,
        (err: unknown) => isNotFound(err),
      );
      expect(gone).toBe(true);
    }, waitLong);
  });
});

describe('control-plane binaries', () => {
  afterAll(() => {
    vi.unstubAllEnvs();
  });

  it('come from KUBEBUILDER_ASSETS when it is set', async () => {
    const cached = await locateControlPlaneBinaries();
    const assets = await mkdtemp(path.join(os.tmpdir(), 'vmop-assets-'));
    try {
      for (const binary of Object.values(cached))
        await symlink(binary, path.join(assets, path.basename(binary)));
      vi.stubEnv('KUBEBUILDER_ASSETS', assets);
      expect(await locateControlPlaneBinaries()).toEqual({
        etcd: path.join(assets, 'etcd'),
        kubeApiserver: path.join(assets, 'kube-apiserver'),
        kubeControllerManager: path.join(assets, 'kube-controller-manager'),
        kubeScheduler: path.join(assets, 'kube-scheduler'),
      });
      await rm(path.join(assets, 'kube-scheduler'));
      await expect(locateControlPlaneBinaries()).rejects.toThrow(
        `missing or not executable (from KUBEBUILDER_ASSETS=${assets}): ${path.join(assets, 'kube-scheduler')}`,
      );
    } finally {
      await rm(assets, { recursive: true, force: true });
    }
  });
});

describe('private control plane', () => {
  it('stop() ends etcd, kube-apiserver, the controller manager and the scheduler, and removes its directory', async () => {
    const controlPlane = await startControlPlane();
    try {
      expect((await processesMentioning(controlPlane.dir)).map((p) => p.command).sort()).toEqual(
        expect.arrayContaining(['etcd', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler']),
      );
      const namespaces = await controlPlane.kubeConfig.makeApiClient(CoreV1Api).listNamespace();
      expect(namespaces.items.map((item) => item.metadata?.name)).toContain('default');
    } finally {
      await controlPlane.stop();
    }
    expect(await processesMentioning(controlPlane.dir)).toEqual([]);
    expect(existsSync(controlPlane.dir)).toBe(false);
  });

  it('leaves no process and no directory when the process that started it is killed, and no other process is touched: not one that got the pid of a process it restarted', async () => {
    const moduleUrl = pathToFileURL(path.resolve('src/devenv/control-plane.ts')).href;
    const script = `
      const { startControlPlane } = await import(${JSON.stringify(moduleUrl)});
      const controlPlane = await startControlPlane();
      console.log(JSON.stringify({ dir: controlPlane.dir }));
      setInterval(() => {}, 1000);
    `;
    const owner = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '--eval', script], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let dir: string | undefined;
    let stranger: Bystander | undefined;
    const scratch = await mkdtemp(path.join(os.tmpdir(), 'vmop-recycled-pid-'));
    try {
      const firstLine = once(createInterface({ input: owner.stdout }), 'line').then(([line]) => String(line));
      const line = await Promise.race([firstLine, once(owner, 'exit').then(() => undefined)]);
      if (line === undefined) throw new Error('the owner process exited before its control plane was ready');
      const announcedDir = z.object({ dir: z.string() }).parse(JSON.parse(line)).dir;
      dir = announcedDir;
      expect((await processesMentioning(announcedDir)).map((p) => p.command)).toEqual(
        expect.arrayContaining(['etcd', 'kube-apiserver', 'kube-controller-manager']),
      );
      // The scheduler dies and is started again: its old pid goes to a process of nobody's.
      const scheduler = async () =>
        (await processesMentioning(announcedDir)).find((p) => p.command === 'kube-scheduler');
      for (let round = 0; round < 10 && !stranger; round++) {
        const killed = (await scheduler())!;
        process.kill(killed.pid, 'SIGKILL');
        await vi.waitFor(
          async () => expect((await scheduler())?.pid ?? killed.pid).not.toBe(killed.pid),
          waitLong,
        );
        stranger = await bystanderWithPid(killed.pid, path.join(scratch, 'signals'));
      }
      if (!stranger) throw new Error('10 freed pids were each taken by another process before the bystander');

      owner.kill('SIGKILL');
      await vi.waitFor(async () => {
        expect(await processesMentioning(announcedDir)).toEqual([]);
        expect(existsSync(announcedDir)).toBe(false);
      }, waitLong);
      expect(stranger.running(), 'the process that got the old pid').toBe(true);
      expect(stranger.signals()).toEqual([]);
    } finally {
      owner.kill('SIGKILL');
      await stranger?.stop();
      await rm(scratch, { recursive: true, force: true });
      if (dir) {
        for (const leftover of await processesMentioning(dir)) process.kill(leftover.pid, 'SIGKILL');
        await rm(dir, { recursive: true, force: true });
      }
    }
  });
});

function crd(group: string, kind: string, plural: string): V1CustomResourceDefinition {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${plural}.${group}` },
    spec: {
      group,
      scope: 'Namespaced',
      names: { kind, plural, singular: kind.toLowerCase(), listKind: `${kind}List` },
      versions: [
        {
          name: 'v1',
          served: true,
          storage: true,
          schema: {
            openAPIV3Schema: {
              type: 'object',
              properties: { spec: { type: 'object', properties: { size: { type: 'integer' } } } },
            },
          },
        },
      ],
    },
  };
}

/** Live processes whose command line mentions `text`, as `ps` would show them. */
async function processesMentioning(text: string): Promise<Array<{ pid: number; command: string }>> {
  const found: Array<{ pid: number; command: string }> = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const argv = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    if (argv.includes(text))
      found.push({ pid: Number(entry), command: path.basename(argv.split('\0')[0] ?? '') });
  }
  return found;
}
