// The files a ConfigMap or Secret volume holds, as kubelet projects them. Pure.
import path from 'node:path';
import type {
  V1ConfigMap,
  V1ConfigMapVolumeSource,
  V1KeyToPath,
  V1Secret,
  V1SecretVolumeSource,
} from '@kubernetes/client-node';

export interface ProjectedFile {
  content: Buffer;
  mode: number;
}

/** Relative file path → file. */
export type Payload = Map<string, ProjectedFile>;

export type ProjectionResult = { payload: Payload } | { error: string };

/** Kubernetes' default for both kinds; the apiserver fills it in anyway. */
const DEFAULT_MODE = 0o644;

/** A relative path that stays inside the volume and does not touch the writer's `..` entries. */
export function isSafeRelativePath(file: string): boolean {
  if (file === '' || path.isAbsolute(file)) return false;
  return file
    .split('/')
    .every((part) => part !== '' && part !== '.' && part !== '..' && !part.startsWith('..'));
}

function project(
  kind: string,
  objectName: string,
  data: Map<string, Buffer> | undefined,
  source: { items?: V1KeyToPath[]; defaultMode?: number; optional?: boolean },
  modeMask: number,
): ProjectionResult {
  if (!data) {
    return source.optional
      ? { payload: new Map() }
      : { error: `${kind} ${JSON.stringify(objectName)} not found` };
  }
  const defaultMode = source.defaultMode ?? DEFAULT_MODE;
  const items: V1KeyToPath[] = source.items ?? [...data.keys()].map((key) => ({ key, path: key }));
  const payload: Payload = new Map();
  for (const item of items) {
    const content = data.get(item.key);
    if (content === undefined) {
      if (source.optional) continue;
      return { error: `${kind} ${objectName}: key ${JSON.stringify(item.key)} not found` };
    }
    if (!isSafeRelativePath(item.path)) return { error: `${kind} ${objectName}: invalid path ${item.path}` };
    payload.set(item.path, { content, mode: (item.mode ?? defaultMode) & modeMask });
  }
  return { payload };
}

const entries = (record: Record<string, string> | undefined, encoding: BufferEncoding) =>
  Object.entries(record ?? {}).map(([key, value]) => [key, Buffer.from(value, encoding)] as const);

export function configMapPayload(
  source: V1ConfigMapVolumeSource,
  configMap: V1ConfigMap | undefined,
): ProjectionResult {
  const data =
    configMap && new Map([...entries(configMap.data, 'utf8'), ...entries(configMap.binaryData, 'base64')]);
  return project('configmap', source.name ?? '', data, source, 0o777);
}

/** Secret files are never readable by group or others, whatever defaultMode says. */
export function secretPayload(source: V1SecretVolumeSource, secret: V1Secret | undefined): ProjectionResult {
  const data = secret && new Map(entries(secret.data, 'base64'));
  return project('secret', source.secretName ?? '', data, source, 0o700);
}
