// The apiserver's own count of requests (apiserver_request_total), read through kubectl, and the
// difference between two readings for the resources vmop reads and writes.
import { execFileSync } from 'node:child_process';

export type RequestTotals = Map<string, number>;

/** One reading: each labelled series of apiserver_request_total with its count. */
export function readRequestTotals(kubeconfigPath: string): RequestTotals {
  const text = execFileSync('kubectl', ['--kubeconfig', kubeconfigPath, 'get', '--raw', '/metrics'], {
    encoding: 'utf8',
    maxBuffer: 256 * 2 ** 20,
  });
  const totals: RequestTotals = new Map();
  for (const match of text.matchAll(/^apiserver_request_total\{([^}]*)\} (\S+)$/gm)) {
    totals.set(match[1]!, Number(match[2]));
  }
  return totals;
}

const labelsOf = (series: string) =>
  Object.fromEntries([...series.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!]));

/** What vmop reads and writes; kube-controller-manager's own work (leases, revisions, StatefulSet status) is left out. */
const VMOP_RESOURCES = new Set([
  'vms',
  'virtualmachineoperations',
  'statefulsets',
  'configmaps',
  'secrets',
  'serviceaccounts',
  'services',
  'pods',
  'persistentvolumeclaims',
  'events',
]);
const READS = new Set(['GET', 'LIST', 'WATCH']);

export interface RequestDelta {
  reads: number;
  writes: number;
  /** `VERB resource[/subresource]` → count, for the curious. */
  series: Record<string, number>;
}

export function requestDelta(before: RequestTotals, after: RequestTotals): RequestDelta {
  const delta: RequestDelta = { reads: 0, writes: 0, series: {} };
  for (const [series, count] of after) {
    const labels = labelsOf(series);
    const resource = labels.resource ?? '';
    if (!VMOP_RESOURCES.has(resource)) continue;
    if (resource === 'statefulsets' && labels.subresource === 'status') continue; // kube-controller-manager's
    const n = count - (before.get(series) ?? 0);
    if (n <= 0) continue;
    const verb = labels.verb ?? '';
    if (READS.has(verb)) delta.reads += n;
    else delta.writes += n;
    const name = `${verb} ${resource}${labels.subresource ? `/${labels.subresource}` : ''}`;
    delta.series[name] = (delta.series[name] ?? 0) + n;
  }
  return delta;
}
