import { access, constants } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { createLogger, type Logger } from '../util/logger.js';
import { runBuildScript } from './build-script.js';

export interface ControlPlaneBinaries {
  etcd: string;
  kubeApiserver: string;
  kubeControllerManager: string;
  kubeScheduler: string;
}

export interface NodeBinaries {
  kubelet: string;
  kubeProxy: string;
  helm: string;
  /** go-containerregistry's in-memory OCI registry, and crane to push to it (disk images). */
  registry: string;
  crane: string;
  /** Dex, the OpenID Connect provider people log in at (the web GUI). */
  dex: string;
  /** kube-router, run with its firewall only: the NetworkPolicy enforcer of the nodes. */
  kubeRouter: string;
}

const BUILD_SCRIPT = 'build-kubernetes.sh';

/** What build-kubernetes.sh prints on stdout, one `KEY=value` a line. */
const BuildScriptOutput = z.object({
  K8S_BIN_DIR: z.string().min(1),
  ETCD_BIN_DIR: z.string().min(1),
  COREDNS_BIN_DIR: z.string().min(1),
  HELM_BIN_DIR: z.string().min(1),
  GCR_BIN_DIR: z.string().min(1),
  DEX_BIN_DIR: z.string().min(1),
  KUBE_ROUTER_BIN_DIR: z.string().min(1),
});
type BuildOutput = z.infer<typeof BuildScriptOutput>;

let building: Promise<BuildOutput> | undefined;
/** The build script's directories; one run per process (it is a quick no-op when the cache is warm). */
function buildOutput(logger: Logger): Promise<BuildOutput> {
  building ??= runBuildScript(BUILD_SCRIPT, BuildScriptOutput, logger).catch((err: unknown) => {
    building = undefined;
    throw err;
  });
  return building;
}

async function requireExecutables<T extends object>(binaries: T, source: string): Promise<T> {
  const missing: string[] = [];
  for (const binary of Object.values(binaries) as string[]) {
    await access(binary, constants.X_OK).catch(() => missing.push(binary));
  }
  if (missing.length > 0)
    throw new Error(`Kubernetes binaries missing or not executable (from ${source}): ${missing.join(', ')}`);
  return binaries;
}

/**
 * Finds etcd, kube-apiserver, kube-controller-manager and kube-scheduler: in `KUBEBUILDER_ASSETS`
 * when that is set, else in the version-keyed cache of scripts/build-kubernetes.sh, which builds
 * them when missing.
 */
export async function locateControlPlaneBinaries(
  logger: Logger = createLogger('kube-binaries'),
): Promise<ControlPlaneBinaries> {
  const assets = process.env.KUBEBUILDER_ASSETS;
  const dirs = assets
    ? { k8s: assets, etcd: assets }
    : await buildOutput(logger).then((out) => ({ k8s: out.K8S_BIN_DIR, etcd: out.ETCD_BIN_DIR }));
  return requireExecutables(
    {
      etcd: path.join(dirs.etcd, 'etcd'),
      kubeApiserver: path.join(dirs.k8s, 'kube-apiserver'),
      kubeControllerManager: path.join(dirs.k8s, 'kube-controller-manager'),
      kubeScheduler: path.join(dirs.k8s, 'kube-scheduler'),
    },
    assets ? `KUBEBUILDER_ASSETS=${assets}` : `scripts/${BUILD_SCRIPT}`,
  );
}

/** kubelet, kube-proxy, helm, the registry, crane, Dex and kube-router, from the cache of scripts/build-kubernetes.sh. */
export async function locateNodeBinaries(
  logger: Logger = createLogger('kube-binaries'),
): Promise<NodeBinaries> {
  const out = await buildOutput(logger);
  return requireExecutables(
    {
      kubelet: path.join(out.K8S_BIN_DIR, 'kubelet'),
      kubeProxy: path.join(out.K8S_BIN_DIR, 'kube-proxy'),
      helm: path.join(out.HELM_BIN_DIR, 'helm'),
      registry: path.join(out.GCR_BIN_DIR, 'registry'),
      crane: path.join(out.GCR_BIN_DIR, 'crane'),
      dex: path.join(out.DEX_BIN_DIR, 'dex'),
      kubeRouter: path.join(out.KUBE_ROUTER_BIN_DIR, 'kube-router'),
    },
    `scripts/${BUILD_SCRIPT}`,
  );
}
