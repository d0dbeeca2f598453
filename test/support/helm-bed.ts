// What the Helm chart's tests need on the cluster bed (test/support/beds.ts): the helm binary, and
// the values a user sets to install the chart there: where the locally built images are.
import { existsSync } from 'node:fs';
import { locateNodeBinaries } from '../../src/devenv/kube-binaries.js';
import type { ClusterBedState } from './cluster-owner.js';

export const helmBinary = async () => (await locateNodeBinaries()).helm;

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
