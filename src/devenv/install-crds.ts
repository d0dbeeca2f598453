import {
  ApiextensionsV1Api,
  KubernetesObjectApi,
  PatchStrategy,
  loadYaml,
  type KubeConfig,
  type V1CustomResourceDefinition,
} from '@kubernetes/client-node';
import { CRDS, renderCrdYaml } from '../api/crd.js';
import { USER_ROLES } from '../api/user-roles.js';

const FIELD_MANAGER = 'vmop-installer';

/** Server-side applies vmop's CRDs (idempotent) and waits until the apiserver serves them. */
export async function installCrds(kubeConfig: KubeConfig, timeoutMs = 30_000): Promise<void> {
  const objects = KubernetesObjectApi.makeApiClient(kubeConfig);
  const api = kubeConfig.makeApiClient(ApiextensionsV1Api);
  const deadline = Date.now() + timeoutMs;
  for (const definition of CRDS) {
    // Through the typed model: client-node's serializer drops raw JSON keys such as x-kubernetes-validations.
    const crd = loadYaml<V1CustomResourceDefinition>(renderCrdYaml(definition));
    await objects.patch(crd, undefined, undefined, FIELD_MANAGER, true, PatchStrategy.ServerSideApply);
    await waitUntilEstablished(api, crd.metadata!.name!, deadline, timeoutMs);
  }
}

/** Server-side applies the people's ClusterRoles (vmop:view/edit/admin), as the chart does. */
export async function installUserRoles(kubeConfig: KubeConfig): Promise<void> {
  const objects = KubernetesObjectApi.makeApiClient(kubeConfig);
  for (const role of USER_ROLES)
    await objects.patch(role, undefined, undefined, FIELD_MANAGER, true, PatchStrategy.ServerSideApply);
}

async function waitUntilEstablished(
  api: ApiextensionsV1Api,
  name: string,
  deadline: number,
  timeoutMs: number,
): Promise<void> {
  for (;;) {
    const current = await api.readCustomResourceDefinition({ name });
    if (current.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True')) return;
    if (Date.now() > deadline) throw new Error(`CRD ${name} not established after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
