import type { TestProject } from 'vitest/node';
import { startControlPlane } from '../../src/devenv/control-plane.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Admin kubeconfig of the control plane shared by the whole test run. */
    kubeconfigYaml: string;
    /** The same kubeconfig as a file, for kubectl. */
    kubeconfigPath: string;
  }
}

/** One control plane for the whole run; tests isolate themselves by namespace (see test/support/kube.ts). */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const controlPlane = await startControlPlane();
  project.provide('kubeconfigYaml', controlPlane.kubeconfigYaml);
  project.provide('kubeconfigPath', controlPlane.kubeconfigPath);
  return () => controlPlane.stop();
}
