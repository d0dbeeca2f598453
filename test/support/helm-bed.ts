// What the Helm chart's tests need on the cluster bed (test/support/beds.ts): the helm binary, and
// the values a user sets to install the chart there: where the locally built images are.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { promisify } from 'node:util';
import { afterEach } from 'vitest';
import { locateNodeBinaries } from '../../src/devenv/kube-binaries.js';
import type { ClusterBedState } from './cluster-owner.js';

const run = promisify(execFile);

export const helmBinary = async () => (await locateNodeBinaries()).helm;

/**
 * `helm(...args)` against the bed's cluster, its stdout. A helm still running when its test ends
 * (timed out) is stopped: left alone it holds the release "pending" and the next test's upgrade
 * fails with "another operation is in progress" (CI saw that cascade); stopped with SIGTERM, helm
 * marks the release failed and frees it. Call in a describe block.
 */
export function helmOfTheSuite(kubeconfig: () => string): (...args: string[]) => Promise<string> {
  let runs = new AbortController();
  afterEach(() => {
    runs.abort();
    runs = new AbortController();
  });
  return async (...args) =>
    (
      await run(await helmBinary(), ['--kubeconfig', kubeconfig(), ...args], {
        maxBuffer: 32 * 1024 * 1024,
        signal: runs.signal,
      })
    ).stdout;
}

/** `localhost/vmop-manager:abc` → ['localhost/vmop-manager', 'abc'] */
const splitRef = (ref: string) => [ref.slice(0, ref.lastIndexOf(':')), ref.slice(ref.lastIndexOf(':') + 1)];

/** Only what a user sets: where the images are and how to pull them (they are on the nodes already). */
export function chartImageValues(state: ClusterBedState): string[] {
  const [managerRepository, managerTag] = splitRef(state.images.manager);
  const [runnerRepository, runnerTag] = splitRef(state.images.runner);
  return [
    ...['--set', `image.repository=${managerRepository}`, '--set', `image.tag=${managerTag}`],
    ...['--set', 'image.pullPolicy=Never'],
    ...['--set', `runner.image.repository=${runnerRepository}`, '--set', `runner.image.tag=${runnerTag}`],
    ...['--set', 'runner.image.pullPolicy=Never'],
    // Runner pods get /dev/kvm from the chart's node agent where this machine has it.
    ...(existsSync('/dev/kvm') ? [] : ['--set', 'runner.kvm=false']),
  ];
}

/**
 * The release namespace's labels, as docs/installing.md asks: Pod Security "privileged" enforced
 * for the node agent, "restricted" warned about, so that whatever else breaks it says so.
 */
export const RELEASE_NAMESPACE_LABELS = [
  'pod-security.kubernetes.io/enforce=privileged',
  'pod-security.kubernetes.io/warn=restricted',
];

/** Makes the release namespace (if it is not there) with RELEASE_NAMESPACE_LABELS. */
export async function makeReleaseNamespace(
  kubectl: (args: string[]) => Promise<string>,
  namespace: string,
): Promise<void> {
  await kubectl(['create', 'namespace', namespace]).catch((err: { stderr?: string }) => {
    if (!/AlreadyExists/.test(err.stderr ?? '')) throw err;
  });
  await kubectl(['label', 'namespace', namespace, '--overwrite', ...RELEASE_NAMESPACE_LABELS]);
}
