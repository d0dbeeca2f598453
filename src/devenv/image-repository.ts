// The CD and boot image repository of a namespace, as VM-Operator defines it: a PVC called
// `vmop-image-repository` that runner pods mount read-only. In the local cluster it is a `local`
// PV on a directory of this machine (the test guest's kernel and initramfs live there).
import { CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import { isConflict } from '../kube/clients.js';
import { IMAGE_REPOSITORY_CLAIM } from '../reconcilers/virtual-machine/naming.js';

/** Creates (if missing) a PV on `hostDir` on `nodeName` and the namespace's repository PVC bound to it. */
export async function provideImageRepository(input: {
  kubeConfig: KubeConfig;
  namespace: string;
  hostDir: string;
  nodeName: string;
}): Promise<void> {
  const core = input.kubeConfig.makeApiClient(CoreV1Api);
  const volumeName = `vmop-image-repository-${input.namespace}`;
  const ignoreExisting = (err: unknown) => {
    if (!isConflict(err)) throw err;
  };
  await core
    .createPersistentVolume({
      body: {
        metadata: { name: volumeName },
        spec: {
          capacity: { storage: '1Gi' },
          accessModes: ['ReadOnlyMany'],
          volumeMode: 'Filesystem',
          storageClassName: '',
          persistentVolumeReclaimPolicy: 'Retain',
          claimRef: { namespace: input.namespace, name: IMAGE_REPOSITORY_CLAIM },
          local: { path: input.hostDir },
          nodeAffinity: {
            required: {
              nodeSelectorTerms: [
                {
                  matchExpressions: [
                    { key: 'kubernetes.io/hostname', operator: 'In', values: [input.nodeName] },
                  ],
                },
              ],
            },
          },
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
          volumeName,
          resources: { requests: { storage: '1Gi' } },
        },
      },
    })
    .catch(ignoreExisting);
}
