import type { ClusterVms } from '../../test/support/cluster-vms.js';

/** Where a claim of `vmop dev`'s local volumes lives on this machine (its runner data: the console log). */
export async function hostPathOfClaim(vms: ClusterVms, claim: string): Promise<string> {
  const volume = (await vms.kubectl(['get', 'pvc', claim, '-o', 'jsonpath={.spec.volumeName}'])).trim();
  return (await vms.kubectl(['get', 'pv', volume, '-o', 'jsonpath={.spec.local.path}'])).trim();
}
