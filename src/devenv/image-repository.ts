// The CD and boot image repository of a namespace, as VM-Operator defines it: a PVC called
// `vmop-image-repository` that runner pods mount read-only. In the local cluster it is a
// `hostPath` PV on a directory of this machine (the test guest's kernel and initramfs live there),
// which every node of the cluster sees, since they all run on this machine.
import { CoreV1Api, type KubeConfig, type V1Namespace } from '@kubernetes/client-node';
import { isConflict, isNotFound } from '../kube/clients.js';
import { watchObjects } from '../kube/watch.js';
import { IMAGE_REPOSITORY_CLAIM } from '../reconcilers/virtual-machine/naming.js';
import type { Logger } from '../util/logger.js';

/** One PV per namespace incarnation: a namespace made again under its name gets a new one. */
const volumeName = (namespace: V1Namespace) =>
  `vmop-image-repository-${namespace.metadata!.name}-${namespace.metadata!.uid!.slice(0, 8)}`;

/** Creates (if missing) a PV on `hostDir` and the namespace's repository PVC bound to it. */
export async function provideImageRepository(input: {
  kubeConfig: KubeConfig;
  namespace: string;
  hostDir: string;
}): Promise<void> {
  const core = input.kubeConfig.makeApiClient(CoreV1Api);
  const namespace = await core.readNamespace({ name: input.namespace });
  const volume = volumeName(namespace);
  const ignoreExisting = (err: unknown) => {
    if (!isConflict(err)) throw err;
  };
  await core
    .createPersistentVolume({
      body: {
        metadata: { name: volume, labels: { 'app.kubernetes.io/part-of': 'vmop-devenv' } },
        spec: {
          capacity: { storage: '1Gi' },
          accessModes: ['ReadOnlyMany'],
          volumeMode: 'Filesystem',
          storageClassName: '',
          persistentVolumeReclaimPolicy: 'Retain',
          claimRef: { namespace: input.namespace, name: IMAGE_REPOSITORY_CLAIM },
          hostPath: { path: input.hostDir, type: 'Directory' },
        },
      },
    })
    .catch(ignoreExisting);
  await core
    .createNamespacedPersistentVolumeClaim({
      namespace: input.namespace,
      body: {
        metadata: { name: IMAGE_REPOSITORY_CLAIM },
        spec: {
          accessModes: ['ReadOnlyMany'],
          storageClassName: '',
          volumeName: volume,
          resources: { requests: { storage: '1Gi' } },
        },
      },
    })
    .catch(ignoreExisting);
}

/**
 * Gives every namespace, also those made later, the image repository (as `vmop dev` does), and
 * removes a namespace's PV when the namespace goes.
 */
export function provideImageRepositoryEverywhere(input: {
  kubeConfig: KubeConfig;
  hostDir: string;
  logger: Logger;
}) {
  const { kubeConfig, hostDir, logger } = input;
  const core = kubeConfig.makeApiClient(CoreV1Api);
  const failed = (namespace: string) => (err: unknown) =>
    logger.warn({ namespace, err: String(err) }, 'could not provide the image repository');
  return watchObjects<V1Namespace>(
    kubeConfig,
    { path: '/api/v1/namespaces', list: () => core.listNamespace() },
    {
      upsert(namespace) {
        const name = namespace.metadata!.name!;
        if (namespace.status?.phase === 'Terminating' || name.startsWith('kube-')) return;
        provideImageRepository({ kubeConfig, namespace: name, hostDir }).catch(failed(name));
      },
      deleted(namespace) {
        const name = namespace.metadata!.name!;
        core.deletePersistentVolume({ name: volumeName(namespace) }).catch((err: unknown) => {
          if (!isNotFound(err)) failed(name)(err);
        });
      },
    },
    logger,
  );
}
