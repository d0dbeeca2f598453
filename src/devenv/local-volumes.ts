// Dynamic PersistentVolumes for the local cluster's two StorageClasses:
// - `local` (the default): node-local volumes, made on the node the scheduler picked for the pod.
//   A Block claim gets a loop device on a sparse file (VM disks are raw block devices), a
//   Filesystem claim a directory; the PV is a `local` one with affinity to that node.
// - `shared`: volumes any node can use at once (ReadWriteMany), the stand-in for network storage
//   (Ceph RBD or iSCSI for Block claims, NFS or CephFS for Filesystem ones): one loop device or
//   directory, which every node sees since they all run on this machine; the PV is a `local` one
//   whose affinity admits every node of the cluster.
// Released volumes of the Delete policy are removed with their data. Both classes allow volume
// expansion: a bound claim that asks for more gets it (the sparse file grows, and the loop device
// with it), as an external resizer of a CSI driver would do it.
import { execFile } from 'node:child_process';
import { mkdir, open, rm } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import {
  CoreV1Api,
  type KubeConfig,
  type KubernetesObject,
  type V1PersistentVolume,
  type V1PersistentVolumeClaim,
} from '@kubernetes/client-node';
import { parseMemorySize } from '../api/runner-config.js';
import { isConflict, readOptional } from '../kube/clients.js';
import { watchObjects } from '../kube/watch.js';
import type { Logger } from '../util/logger.js';
import { mergePatch } from '../kube/merge-patch.js';

const run = promisify(execFile);

export const STORAGE_CLASS = 'local';
export const SHARED_STORAGE_CLASS = 'shared';
export const PROVISIONER = 'vmop.dev/local-volume';
const PROVISIONED_LABEL = 'vmop.dev/local-volume';

export function storageClassObjects(): KubernetesObject[] {
  const storageClass = (name: string, extra: object) =>
    ({
      apiVersion: 'storage.k8s.io/v1',
      kind: 'StorageClass',
      metadata: { name },
      provisioner: PROVISIONER,
      reclaimPolicy: 'Delete',
      allowVolumeExpansion: true,
      ...extra,
    }) as KubernetesObject;
  return [
    storageClass(STORAGE_CLASS, {
      metadata: {
        name: STORAGE_CLASS,
        annotations: { 'storageclass.kubernetes.io/is-default-class': 'true' },
      },
      // As local volumes are: the scheduler picks the node first, then the volume is made there.
      volumeBindingMode: 'WaitForFirstConsumer',
    }),
    // Reachable from every node: made at once, as network storage is.
    storageClass(SHARED_STORAGE_CLASS, { volumeBindingMode: 'Immediate' }),
  ];
}

export interface LocalVolumeProvisioner {
  stop(): Promise<void>;
}

const isBlock = (claim: V1PersistentVolumeClaim) => claim.spec?.volumeMode === 'Block';

/** The file behind a loop device, or undefined when it is not attached. */
async function loopBackingFile(device: string): Promise<string | undefined> {
  const listed = await run('losetup', ['--list', '--noheadings', '--output', 'BACK-FILE', device]).catch(
    () => undefined,
  );
  return listed?.stdout.trim().replace(/ \(deleted\)$/, '') || undefined;
}

const SELECTED_NODE = 'volume.kubernetes.io/selected-node';

/**
 * Where a claim still without a volume gets one: a `local` claim on the node the scheduler placed
 * its pod on, a `shared` Block claim on every node; undefined when it is not (yet) for this provisioner.
 */
function placement(claim: V1PersistentVolumeClaim, nodeNames: string[]): string[] | undefined {
  if (!claim.spec || claim.spec.volumeName || claim.status?.phase !== 'Pending') return undefined;
  if (claim.metadata?.deletionTimestamp) return undefined;
  if (claim.spec.storageClassName === SHARED_STORAGE_CLASS) return nodeNames;
  const selected = claim.metadata?.annotations?.[SELECTED_NODE];
  if (claim.spec.storageClassName !== STORAGE_CLASS || !selected || !nodeNames.includes(selected))
    return undefined;
  return [selected];
}

/** A bound claim of these classes that asks for more than it holds. */
function wantsMore(claim: V1PersistentVolumeClaim): boolean {
  const className = claim.spec?.storageClassName;
  if (className !== STORAGE_CLASS && className !== SHARED_STORAGE_CLASS) return false;
  if (claim.status?.phase !== 'Bound' || claim.metadata?.deletionTimestamp) return false;
  const requested = parseMemorySize(String(claim.spec?.resources?.requests?.storage ?? ''));
  const capacity = parseMemorySize(String(claim.status.capacity?.storage ?? ''));
  return requested !== undefined && capacity !== undefined && requested > capacity;
}

export function startLocalVolumeProvisioner(options: {
  kubeConfig: KubeConfig;
  /** The cluster's nodes, and where each keeps its volumes' data (sparse files and directories). */
  nodes: Array<{ name: string; volumeDir: string }>;
  /** Where shared volumes' data lives. */
  sharedDir: string;
  logger: Logger;
}): LocalVolumeProvisioner & { start(): Promise<void> } {
  const { kubeConfig, nodes, sharedDir, logger } = options;
  const nodeNames = nodes.map((node) => node.name);
  const dirOf = (volume: { nodeAffinity: string[] }) =>
    volume.nodeAffinity.length === 1
      ? nodes.find((node) => node.name === volume.nodeAffinity[0])!.volumeDir
      : sharedDir;
  /** Where a provisioned volume keeps its data: its node's directory, or the shared one. */
  const dirOfVolume = (volume: V1PersistentVolume) =>
    dirOf({
      nodeAffinity:
        volume.spec?.nodeAffinity?.required?.nodeSelectorTerms?.[0]?.matchExpressions?.[0]?.values ?? [],
    });
  const core = kubeConfig.makeApiClient(CoreV1Api);
  const inFlight = new Set<string>();

  async function provision(claim: V1PersistentVolumeClaim, nodeAffinity: string[]): Promise<void> {
    const dir = dirOf({ nodeAffinity });
    const uid = claim.metadata!.uid!;
    const name = `pvc-${uid}`;
    // A claim stays Pending until the PV controller binds it: later events must not provision again.
    if (await readOptional(() => core.readPersistentVolume({ name }))) return;
    const requested = String(claim.spec?.resources?.requests?.storage ?? '');
    const bytes = parseMemorySize(requested);
    if (bytes === undefined) {
      logger.warn(
        { claim: claim.metadata?.name, requested },
        'cannot provision a claim without a storage size',
      );
      return;
    }
    await mkdir(dir, { recursive: true });
    const backing = path.join(dir, isBlock(claim) ? `${name}.img` : name);
    let localPath = backing;
    if (isBlock(claim)) {
      const handle = await open(backing, 'a'); // never truncates data a retry finds
      await handle.truncate(bytes);
      await handle.close();
      localPath = (await run('losetup', ['--find', '--show', backing])).stdout.trim();
    } else {
      await mkdir(backing, { recursive: true });
    }
    const volume: V1PersistentVolume = {
      metadata: {
        name,
        labels: { [PROVISIONED_LABEL]: 'true' },
        annotations: { 'pv.kubernetes.io/provisioned-by': PROVISIONER },
      },
      spec: {
        capacity: { storage: requested },
        accessModes: claim.spec?.accessModes ?? ['ReadWriteOnce'],
        volumeMode: isBlock(claim) ? 'Block' : 'Filesystem',
        storageClassName: claim.spec!.storageClassName,
        persistentVolumeReclaimPolicy: 'Delete',
        claimRef: {
          apiVersion: 'v1',
          kind: 'PersistentVolumeClaim',
          namespace: claim.metadata!.namespace!,
          name: claim.metadata!.name!,
          uid,
        },
        local: { path: localPath },
        nodeAffinity: {
          required: {
            nodeSelectorTerms: [
              { matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: nodeAffinity }] },
            ],
          },
        },
      },
    };
    try {
      await core.createPersistentVolume({ body: volume });
    } catch (err) {
      // Undo what this attempt made, and only that: a PV that exists already owns the data.
      if (localPath !== backing) await run('losetup', ['--detach', localPath]).catch(() => undefined);
      if (isConflict(err)) return;
      await rm(backing, { recursive: true, force: true });
      throw err;
    }
    logger.info(
      { claim: `${claim.metadata?.namespace}/${claim.metadata?.name}`, volume: name, localPath },
      'provisioned',
    );
  }

  /** Gives a bound claim that asks for more the room it asks for (a volume never shrinks). */
  async function expand(claim: V1PersistentVolumeClaim): Promise<void> {
    const requested = String(claim.spec?.resources?.requests?.storage ?? '');
    const bytes = parseMemorySize(requested);
    const volume = await readOptional(() => core.readPersistentVolume({ name: claim.spec!.volumeName! }));
    if (bytes === undefined || !volume?.metadata?.labels?.[PROVISIONED_LABEL]) return;
    if (volume.spec?.volumeMode === 'Block') {
      const backing = path.join(dirOfVolume(volume), `${volume.metadata.name}.img`);
      const handle = await open(backing, 'r+');
      try {
        if ((await handle.stat()).size < bytes) await handle.truncate(bytes);
      } finally {
        await handle.close();
      }
      const device = volume.spec.local?.path;
      // The loop device learns its file's new size (and every node sees it: one kernel).
      if (device && (await loopBackingFile(device)) === backing)
        await run('losetup', ['--set-capacity', device]);
    }
    await core.patchPersistentVolume(
      { name: volume.metadata.name!, body: { spec: { capacity: { storage: requested } } } },
      mergePatch,
    );
    await core.patchNamespacedPersistentVolumeClaimStatus(
      {
        name: claim.metadata!.name!,
        namespace: claim.metadata!.namespace!,
        body: { status: { capacity: { storage: requested }, conditions: null } },
      },
      mergePatch,
    );
    logger.info(
      {
        claim: `${claim.metadata?.namespace}/${claim.metadata?.name}`,
        volume: volume.metadata.name,
        requested,
      },
      'expanded',
    );
  }

  /** Removes a volume's data: detaches its loop device and deletes the file or directory. */
  async function release(volume: V1PersistentVolume): Promise<void> {
    const name = volume.metadata!.name!;
    const dir = dirOfVolume(volume);
    if (volume.spec?.volumeMode === 'Block') {
      const device = volume.spec.local?.path;
      const backing = path.join(dir, `${name}.img`);
      // Only while it is still this volume's: a released volume's events can come again after its
      // device was detached, and loop devices are reused by the next volume.
      if (device?.startsWith('/dev/loop') && (await loopBackingFile(device)) === backing)
        await run('losetup', ['--detach', device]).catch(() => undefined);
      await rm(backing, { force: true });
    } else {
      await rm(path.join(dir, name), { recursive: true, force: true });
    }
  }

  const once = (id: string, task: () => Promise<void>) => {
    if (inFlight.has(id)) return;
    inFlight.add(id);
    task()
      .catch((err: unknown) => logger.warn({ err: String(err), id }, 'local volume provisioning failed'))
      .finally(() => inFlight.delete(id));
  };

  const claims = watchObjects<V1PersistentVolumeClaim>(
    kubeConfig,
    { path: '/api/v1/persistentvolumeclaims', list: () => core.listPersistentVolumeClaimForAllNamespaces() },
    {
      upsert: (claim) => {
        const nodeAffinity = placement(claim, nodeNames);
        if (nodeAffinity) once(claim.metadata!.uid!, () => provision(claim, nodeAffinity));
        if (wantsMore(claim)) once(`expand:${claim.metadata!.uid!}`, () => expand(claim));
      },
    },
    logger,
  );
  const volumes = watchObjects<V1PersistentVolume>(
    kubeConfig,
    {
      path: '/api/v1/persistentvolumes',
      labelSelector: `${PROVISIONED_LABEL}=true`,
      list: () => core.listPersistentVolume({ labelSelector: `${PROVISIONED_LABEL}=true` }),
    },
    {
      upsert: (volume) => {
        if (volume.status?.phase !== 'Released' || volume.spec?.persistentVolumeReclaimPolicy !== 'Delete')
          return;
        once(volume.metadata!.name!, async () => {
          await release(volume);
          // A later event of the same volume may find it deleted already: nothing to do then.
          const deleted = await readOptional(() =>
            core.deletePersistentVolume({ name: volume.metadata!.name! }),
          );
          if (deleted) logger.info({ volume: volume.metadata!.name }, 'deleted a released volume');
        });
      },
    },
    logger,
  );
  return {
    async start() {
      await Promise.all([claims.start(), volumes.start()]);
    },
    async stop() {
      await Promise.all([claims.stop(), volumes.stop()]);
    },
  };
}
