// The environment of a pod's container, resolved as kubelet resolves it: literal values, the
// downward API (fieldRef), and keys of ConfigMaps and Secrets. Pure: the objects are looked up first.
import type { V1Container, V1EnvVar, V1Pod } from '@kubernetes/client-node';

/** The data of the ConfigMaps and Secrets the env refers to; undefined for one that does not exist. */
export interface EnvSources {
  configMaps: Map<string, Record<string, string> | undefined>;
  secrets: Map<string, Record<string, string> | undefined>;
}

export type EnvResult = { env: Record<string, string> } | { error: string };

/** The ConfigMaps and Secrets (names in the pod's namespace) the container's env reads. */
export function envReferences(container: V1Container): { configMaps: string[]; secrets: string[] } {
  const env = container.env ?? [];
  const names = (pick: (v: V1EnvVar) => string | undefined) => [
    ...new Set(env.map(pick).filter((n): n is string => !!n)),
  ];
  return {
    configMaps: names((v) => v.valueFrom?.configMapKeyRef?.name),
    secrets: names((v) => v.valueFrom?.secretKeyRef?.name),
  };
}

/** A downward-API field, or undefined when the path is not one kubelet supports. */
export function podField(pod: V1Pod, fieldPath: string, hostIP: string): string | undefined {
  const meta = pod.metadata ?? {};
  const keyed = /^metadata\.(labels|annotations)\['(.+)'\]$/.exec(fieldPath);
  if (keyed) return (keyed[1] === 'labels' ? meta.labels : meta.annotations)?.[keyed[2]!] ?? '';
  const fields: Record<string, string | undefined> = {
    'metadata.name': meta.name,
    'metadata.namespace': meta.namespace,
    'metadata.uid': meta.uid,
    'spec.nodeName': pod.spec?.nodeName,
    'spec.serviceAccountName': pod.spec?.serviceAccountName,
    'status.hostIP': hostIP,
    'status.podIP': hostIP,
  };
  return fieldPath in fields ? (fields[fieldPath] ?? '') : undefined;
}

/**
 * `defaults` first, then the container's own variables where they resolve (a missing optional key
 * leaves the default in place). A missing required key is an error, as kubelet's
 * CreateContainerConfigError; envFrom and resourceFieldRef are not supported.
 */
export function resolveEnv(
  pod: V1Pod,
  container: V1Container,
  sources: EnvSources,
  defaults: Record<string, string>,
  hostIP: string,
): EnvResult {
  if (container.envFrom?.length) return { error: 'envFrom is not supported by vmop node' };
  const env = { ...defaults };
  for (const variable of container.env ?? []) {
    const { name, value, valueFrom } = variable;
    if (!valueFrom) {
      env[name] = value ?? '';
      continue;
    }
    if (valueFrom.fieldRef) {
      const field = podField(pod, valueFrom.fieldRef.fieldPath, hostIP);
      if (field === undefined)
        return { error: `env ${name}: unsupported fieldPath ${valueFrom.fieldRef.fieldPath}` };
      env[name] = field;
      continue;
    }
    const ref = valueFrom.configMapKeyRef ?? valueFrom.secretKeyRef;
    if (!ref)
      return { error: `env ${name}: only value, fieldRef, configMapKeyRef and secretKeyRef are supported` };
    const kind = valueFrom.configMapKeyRef ? 'configmap' : 'secret';
    const data = (valueFrom.configMapKeyRef ? sources.configMaps : sources.secrets).get(ref.name ?? '');
    const found = data?.[ref.key];
    if (found !== undefined) env[name] = found;
    else if (!ref.optional) {
      return {
        error: data
          ? `env ${name}: key ${JSON.stringify(ref.key)} not found in ${kind} ${ref.name}`
          : `env ${name}: ${kind} ${JSON.stringify(ref.name)} not found`,
      };
    }
  }
  return { env };
}
