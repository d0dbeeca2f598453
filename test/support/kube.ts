import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { isNotFound } from '../../src/kube/clients.js';
import { inject } from 'vitest';

/** Admin access to the control plane that test/support/global-control-plane.ts started for this run. */
export function sharedKubeConfig(): KubeConfig {
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromString(inject('kubeconfigYaml'));
  return kubeConfig;
}

export interface TestNamespace {
  name: string;
  /** Deletes the namespace; the namespace controller removes its contents in the background. */
  cleanup(): Promise<void>;
}

/** A namespace with a unique, server-generated name starting with `${prefix}-`. */
export async function createTestNamespace(kubeConfig: KubeConfig, prefix: string): Promise<TestNamespace> {
  const core = kubeConfig.makeApiClient(CoreV1Api);
  const created = await core.createNamespace({ body: { metadata: { generateName: `${prefix}-` } } });
  const name = created.metadata!.name!;
  return {
    name,
    cleanup: () =>
      core.deleteNamespace({ name }).then(
        () => undefined,
        (err: unknown) => {
          if (!isNotFound(err)) throw err;
        },
      ),
  };
}

export { isNotFound };

const execFileAsync = promisify(execFile);

/** Runs kubectl against the shared control plane and returns its stdout; `input` goes to its stdin. */
export async function kubectl(args: string[], input?: string): Promise<string> {
  const run = execFileAsync('kubectl', ['--kubeconfig', inject('kubeconfigPath'), ...args]);
  // A kubectl that ends before it reads its input closes the pipe: its exit code says what happened.
  run.child.stdin?.on('error', () => undefined);
  run.child.stdin?.end(input ?? '');
  const { stdout } = await run;
  return stdout;
}

/** kubectl's stderr for a rejected apply, or '' when it was accepted. */
export async function applyError(manifest: string): Promise<string> {
  try {
    await kubectl(['apply', '-f', '-'], manifest);
    return '';
  } catch (err) {
    return String((err as { stderr?: string }).stderr ?? err);
  }
}
