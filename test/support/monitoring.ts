// The chart's alert rules and Grafana dashboard (helm/vmop/files/), for the tests that check them.
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';

export const RULES_FILE = 'helm/vmop/files/prometheus-rules.yaml';
/** The cluster overview reads the managers' series; the one-VM dashboard the runners'. */
export const OVERVIEW_DASHBOARD = 'helm/vmop/files/grafana-dashboard-overview.json';
export const VM_DASHBOARD = 'helm/vmop/files/grafana-dashboard-vm.json';

export interface AlertRule {
  alert: string;
  expr: string;
  annotations: { runbook_url: string };
}

export const alertRules = (
  parse(readFileSync(RULES_FILE, 'utf8')) as { groups: Array<{ rules: AlertRule[] }> }
).groups.flatMap((group) => group.rules);

/** Every PromQL query of a dashboard, by panel title; Grafana's $__rate_interval as Prometheus reads it. */
export const dashboardQueries = (file: string) =>
  (
    JSON.parse(readFileSync(file, 'utf8')) as {
      panels: Array<{ title: string; targets: Array<{ expr: string }> }>;
    }
  ).panels.flatMap((panel) =>
    panel.targets.map((target) => ({
      panel: panel.title,
      expr: target.expr.replaceAll('$__rate_interval', '5m'),
    })),
  );

/** The vmop series an expression reads. */
export const seriesOf = (expr: string) => [...new Set(expr.match(/\bvmop_[a-z_]+/g) ?? [])];

/** Whether `metrics` (a /metrics page) has `series`: a metric of its name, or a histogram's bucket, count or sum. */
export function exports(metrics: string, series: string): boolean {
  if (metrics.includes(`# TYPE ${series} `)) return true;
  const histogram = /^(.*)_(bucket|count|sum)$/.exec(series)?.[1];
  return histogram !== undefined && metrics.includes(`# TYPE ${histogram} histogram`);
}

/** The value of one sample of a /metrics page: `series` with (at least) `labels`; undefined when absent. */
export function sampleValue(metrics: string, series: string, labels: Record<string, string> = {}) {
  for (const line of metrics.split('\n')) {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== series) continue;
    const have = Object.fromEntries(
      [...(match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]]),
    );
    if (Object.entries(labels).every(([name, value]) => have[name] === value)) return Number(match[3]);
  }
  return undefined;
}
