import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { access, constants } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { z } from 'zod';
import { createLogger, type Logger } from '../util/logger.js';

export interface ControlPlaneBinaries {
  etcd: string;
  kubeApiserver: string;
  kubeControllerManager: string;
}

const BUILD_SCRIPT = path.join('scripts', 'build-control-plane.sh');

/** What build-control-plane.sh prints on stdout, one `KEY=value` a line. */
const BuildScriptOutput = z.object({
  K8S_BIN_DIR: z.string().min(1),
  ETCD_BIN_DIR: z.string().min(1),
});

/**
 * Finds etcd, kube-apiserver and kube-controller-manager: in `KUBEBUILDER_ASSETS` when that is set,
 * else in the version-keyed cache of scripts/build-control-plane.sh, which builds them when missing.
 */
export async function locateControlPlaneBinaries(
  logger: Logger = createLogger('kube-binaries'),
): Promise<ControlPlaneBinaries> {
  const assets = process.env.KUBEBUILDER_ASSETS;
  const binaries = assets
    ? binariesIn(assets, assets)
    : await runBuildScript(logger).then((dirs) => binariesIn(dirs.K8S_BIN_DIR, dirs.ETCD_BIN_DIR));
  const missing: string[] = [];
  for (const binary of Object.values(binaries)) {
    await access(binary, constants.X_OK).catch(() => missing.push(binary));
  }
  if (missing.length > 0) {
    const source = assets ? `KUBEBUILDER_ASSETS=${assets}` : BUILD_SCRIPT;
    throw new Error(
      `control-plane binaries missing or not executable (from ${source}): ${missing.join(', ')}`,
    );
  }
  return binaries;
}

function binariesIn(k8sDir: string, etcdDir: string): ControlPlaneBinaries {
  return {
    etcd: path.join(etcdDir, 'etcd'),
    kubeApiserver: path.join(k8sDir, 'kube-apiserver'),
    kubeControllerManager: path.join(k8sDir, 'kube-controller-manager'),
  };
}

/** Runs the build script (a quick no-op when the cache is warm) and returns the directories it prints. */
async function runBuildScript(logger: Logger): Promise<z.infer<typeof BuildScriptOutput>> {
  const script = path.join(repositoryRoot(), BUILD_SCRIPT);
  const child = spawn('bash', [script], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  const stderrTail: string[] = [];
  createInterface({ input: child.stderr }).on('line', (line) => {
    // The script's own progress lines matter to a waiting user; `go` download chatter does not.
    if (line.startsWith('[build-control-plane]')) logger.info(line);
    else logger.debug(line);
    stderrTail.push(line);
    if (stderrTail.length > 30) stderrTail.shift();
  });
  const [code] = (await once(child, 'close')) as [number | null];
  if (code !== 0) {
    throw new Error(`${BUILD_SCRIPT} failed with exit code ${code}:\n${stderrTail.join('\n')}`);
  }
  const assignments = Object.fromEntries(
    stdout
      .split('\n')
      .map((line) => line.match(/^([A-Z0-9_]+)=(.*)$/))
      .filter((match) => match !== null)
      .map((match) => [match[1], match[2]]),
  );
  return BuildScriptOutput.parse(assignments);
}

/** The checkout this module lives in (src/devenv/ from source, dist/src/devenv/ when compiled). */
function repositoryRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!existsSync(path.join(dir, BUILD_SCRIPT))) {
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error(`${BUILD_SCRIPT} not found above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
  return dir;
}
