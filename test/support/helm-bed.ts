// A real cluster for a test file of the Helm chart (made before its tests, gone after), and the
// values a user sets to install the chart there: where the locally built images are.
import { afterAll, beforeAll } from 'vitest';
import { startCluster, type Cluster } from '../../src/devenv/cluster.js';
import { locateNodeBinaries } from '../../src/devenv/kube-binaries.js';
import { clusterVms, type ClusterVms } from './cluster-vms.js';

export interface HelmBed {
  cluster: Cluster;
  helmBinary: string;
  /** kubectl and VM helpers in the VMs' namespace (it has the test guest's image repository). */
  vms: ClusterVms;
  /** The same in the release's namespace. */
  system: ClusterVms;
}

/** Registers the hooks; the bed's fields are there once the file's beforeAll hooks ran. */
export function helmBed(options: { nodes?: number; vmNamespace: string; releaseNamespace: string }): HelmBed {
  const bed = {} as HelmBed;
  beforeAll(async () => {
    bed.cluster = await startCluster({ nodes: options.nodes });
    bed.helmBinary = (await locateNodeBinaries()).helm;
    bed.vms = clusterVms(bed.cluster.kubeconfigPath, options.vmNamespace);
    bed.system = clusterVms(bed.cluster.kubeconfigPath, options.releaseNamespace);
    await bed.cluster.provideImageRepository(options.vmNamespace);
  }, 1_800_000);
  afterAll(async () => {
    await bed.cluster?.stop();
  });
  return bed;
}

/** `localhost/vmop-manager:abc` → ['localhost/vmop-manager', 'abc'] */
const splitRef = (ref: string) => [ref.slice(0, ref.lastIndexOf(':')), ref.slice(ref.lastIndexOf(':') + 1)];

/** Only what a user sets: where the images are and how to pull them (they are on the nodes already). */
export function chartImageValues(cluster: Cluster): string[] {
  const [managerRepository, managerTag] = splitRef(cluster.images.manager.ref);
  const [runnerRepository, runnerTag] = splitRef(cluster.images.runner.ref);
  return [
    ...['--set', `image.repository=${managerRepository}`, '--set', `image.tag=${managerTag}`],
    ...['--set', 'image.pullPolicy=Never'],
    ...['--set', `runner.image.repository=${runnerRepository}`, '--set', `runner.image.tag=${runnerTag}`],
    ...['--set', 'runner.image.pullPolicy=Never'],
  ];
}
