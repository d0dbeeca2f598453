// Turns a pod's PersistentVolumeClaim into a host path: the bound PV's, or, for a claim this node
// provisions, a sparse image file (Block) or a directory (Filesystem) under the state dir.
import { existsSync } from 'node:fs';
import { mkdir, open } from 'node:fs/promises';
import path from 'node:path';
import type { CoreV1Api, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { readOptional } from '../../kube/clients.js';
import type { Logger } from '../../util/logger.js';
import {
  backingPathOf,
  desiredPersistentVolume,
  needsProvisioning,
  provisionedBackingPath,
  requestedBytes,
  volumeModeOf,
  type VolumeMode,
} from './persistent-volume.js';

export type ClaimResolution = { path: string; mode: VolumeMode } | { waiting: string };

export interface ClaimResolverOptions {
  core: CoreV1Api;
  nodeName: string;
  /** Where provisioned volumes live. */
  volumesDir: string;
  logger: Logger;
}

async function createSparseFile(file: string, bytes: number): Promise<void> {
  const handle = await open(file, 'wx').catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'EEXIST') return undefined; // provisioned before (the agent restarted)
    throw err;
  });
  if (!handle) return;
  try {
    await handle.truncate(bytes);
  } finally {
    await handle.close();
  }
}

export function createClaimResolver(options: ClaimResolverOptions) {
  const { core, nodeName, volumesDir, logger } = options;

  async function provision(claim: V1PersistentVolumeClaim): Promise<string> {
    const bytes = requestedBytes(claim);
    if (typeof bytes === 'string') return bytes;
    const backing = provisionedBackingPath(volumesDir, claim);
    await mkdir(volumesDir, { recursive: true });
    if (volumeModeOf(claim) === 'Block') await createSparseFile(backing, bytes);
    else await mkdir(backing, { recursive: true });
    const volume = desiredPersistentVolume(claim, nodeName, backing);
    const created = await core.createPersistentVolume({ body: volume }).then(
      () => true,
      (err: unknown) => {
        if ((err as { code?: number }).code === 409) return false;
        throw err;
      },
    );
    if (created) {
      logger.info(
        {
          claim: `${claim.metadata!.namespace}/${claim.metadata!.name}`,
          volume: volume.metadata!.name,
          backing,
          bytes,
        },
        'provisioned a persistent volume',
      );
    }
    return `waiting for the PV controller to bind persistentvolume ${volume.metadata!.name}`;
  }

  return async function resolveClaim(namespace: string, claimName: string): Promise<ClaimResolution> {
    const claim = await readOptional(() =>
      core.readNamespacedPersistentVolumeClaim({ name: claimName, namespace }),
    );
    if (!claim) return { waiting: `persistentvolumeclaim ${JSON.stringify(claimName)} not found` };
    const volumeName = claim.spec?.volumeName;
    if (claim.status?.phase === 'Bound' && volumeName) {
      const volume = await readOptional(() => core.readPersistentVolume({ name: volumeName }));
      const backing = volume && backingPathOf(volume);
      if (!volume || !backing)
        return { waiting: `persistentvolume ${volumeName} has no local or hostPath source` };
      if (!existsSync(backing))
        return { waiting: `${backing} of persistentvolume ${volumeName} does not exist` };
      return { path: path.resolve(backing), mode: volumeModeOf(volume) };
    }
    if (needsProvisioning(claim)) return { waiting: await provision(claim) };
    return { waiting: `waiting for persistentvolumeclaim ${claimName} to be bound` };
  };
}

export type ClaimResolver = ReturnType<typeof createClaimResolver>;
