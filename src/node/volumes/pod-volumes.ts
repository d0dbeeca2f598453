// The volumes of one pod's container: ConfigMaps and Secrets projected into the pod directory
// (and re-projected whenever they change), PersistentVolumeClaims resolved to host paths; the
// result is the bind mounts and devices the launcher sets up.
import path from 'node:path';
import type { V1Container, V1Pod, V1Volume } from '@kubernetes/client-node';
import type { Logger } from '../../util/logger.js';
import type { BindMount } from '../runtime/launcher.js';
import { writePayload } from './atomic-writer.js';
import type { ClaimResolution, ClaimResolver } from './claims.js';
import { configMapPayload, secretPayload, type ProjectionResult } from './projection.js';
import type { SourceWatches, Subscription } from './source-watches.js';

export interface ContainerVolumes {
  mounts: BindMount[];
  devices: BindMount[];
}

/** ContainerCreating: worth waiting for; CreateContainerConfigError: the pod spec cannot work here. */
export type VolumeSetup =
  | { ready: ContainerVolumes }
  | { waiting: string; reason: 'ContainerCreating' | 'CreateContainerConfigError' };

interface Projection {
  subscription: Subscription<unknown>;
  project(): ProjectionResult;
  /** Writes are serialized: a change during a write is written after it. */
  writing: Promise<void>;
}

export interface PodVolumesDeps {
  sources: SourceWatches;
  resolveClaim: ClaimResolver;
  logger: Logger;
}

export class PodVolumes {
  private readonly projections = new Map<string, Projection>();
  private readonly claims = new Map<string, ClaimResolution & { path: string }>();
  private closed = false;

  constructor(
    private readonly pod: V1Pod,
    /** Projected volumes go to `<volumesDir>/<volume name>`. */
    private readonly volumesDir: string,
    private readonly deps: PodVolumesDeps,
  ) {}

  /** Idempotent: call again while it answers `waiting`. */
  async setUp(container: V1Container): Promise<VolumeSetup> {
    const volumes = new Map((this.pod.spec?.volumes ?? []).map((volume) => [volume.name, volume]));
    const mounts: BindMount[] = [];
    const devices: BindMount[] = [];
    const problem = (waiting: string) => ({ waiting, reason: 'CreateContainerConfigError' as const });
    for (const mount of container.volumeMounts ?? []) {
      const volume = volumes.get(mount.name);
      if (!volume) return problem(`volumeMount ${mount.name}: no such volume`);
      if (mount.subPath || mount.subPathExpr)
        return problem(`volumeMount ${mount.name}: subPath is not supported`);
      const source = await this.source(volume, 'Filesystem');
      if ('waiting' in source) return source;
      const readOnly =
        !!mount.readOnly || !volume.persistentVolumeClaim || !!volume.persistentVolumeClaim.readOnly;
      mounts.push({ source: source.path, target: mount.mountPath, readOnly });
    }
    for (const device of container.volumeDevices ?? []) {
      const volume = volumes.get(device.name);
      if (!volume?.persistentVolumeClaim)
        return problem(`volumeDevice ${device.name}: not a persistentVolumeClaim`);
      const source = await this.source(volume, 'Block');
      if ('waiting' in source) return source;
      devices.push({
        source: source.path,
        target: device.devicePath,
        readOnly: !!volume.persistentVolumeClaim.readOnly,
      });
    }
    return { ready: { mounts, devices } };
  }

  private async source(
    volume: V1Volume,
    mode: 'Block' | 'Filesystem',
  ): Promise<{ path: string } | Exclude<VolumeSetup, { ready: unknown }>> {
    if (volume.configMap || volume.secret) return this.projected(volume);
    const claimName = volume.persistentVolumeClaim?.claimName;
    if (!claimName) {
      return {
        waiting: `volume ${volume.name}: only configMap, secret and persistentVolumeClaim volumes are supported`,
        reason: 'CreateContainerConfigError',
      };
    }
    let claim = this.claims.get(volume.name);
    if (!claim) {
      const resolved = await this.deps.resolveClaim(this.pod.metadata!.namespace!, claimName);
      if ('waiting' in resolved) return { waiting: resolved.waiting, reason: 'ContainerCreating' };
      if (resolved.mode !== mode) {
        const use = mode === 'Block' ? 'volumeDevice' : 'volumeMount';
        return {
          waiting: `volume ${volume.name}: a ${resolved.mode} volume cannot be a ${use}`,
          reason: 'CreateContainerConfigError',
        };
      }
      this.claims.set(volume.name, (claim = resolved));
    }
    return { path: claim.path };
  }

  private async projected(
    volume: V1Volume,
  ): Promise<{ path: string } | Exclude<VolumeSetup, { ready: unknown }>> {
    const dir = path.join(this.volumesDir, volume.name);
    let projection = this.projections.get(volume.name);
    if (!projection) {
      const namespace = this.pod.metadata!.namespace!;
      const onChange = () => this.reproject(volume.name, dir);
      let created: Projection;
      if (volume.configMap) {
        const source = volume.configMap;
        const subscription = await this.deps.sources.configMap(namespace, source.name ?? '', onChange);
        created = {
          subscription,
          project: () => configMapPayload(source, subscription.current()),
          writing: Promise.resolve(),
        };
      } else {
        const source = volume.secret!;
        const subscription = await this.deps.sources.secret(namespace, source.secretName ?? '', onChange);
        created = {
          subscription,
          project: () => secretPayload(source, subscription.current()),
          writing: Promise.resolve(),
        };
      }
      if (this.closed) {
        await created.subscription.close();
        return { waiting: 'the pod is going away', reason: 'ContainerCreating' };
      }
      this.projections.set(volume.name, (projection = created));
    }
    const result = projection.project();
    if ('error' in result)
      return { waiting: `volume ${volume.name}: ${result.error}`, reason: 'ContainerCreating' };
    await writePayload(dir, result.payload);
    return { path: dir };
  }

  /** A changed source: write its new content; a broken one keeps the last good content (as kubelet does). */
  private reproject(volumeName: string, dir: string) {
    const projection = this.projections.get(volumeName);
    if (!projection || this.closed) return;
    projection.writing = projection.writing.then(async () => {
      if (this.closed) return;
      const result = projection.project();
      if ('error' in result) {
        this.deps.logger.warn(
          { volume: volumeName, reason: result.error },
          'keeping the last content of a volume',
        );
        return;
      }
      try {
        if (await writePayload(dir, result.payload))
          this.deps.logger.info({ volume: volumeName }, 'volume updated');
      } catch (err) {
        this.deps.logger.warn({ volume: volumeName, err: String(err) }, 'could not update a volume');
      }
    });
  }

  /** Stops following the volumes' sources. */
  async close(): Promise<void> {
    this.closed = true;
    const projections = [...this.projections.values()];
    this.projections.clear();
    await Promise.all(
      projections.map(async (p) => {
        await p.writing;
        await p.subscription.close();
      }),
    );
  }
}
