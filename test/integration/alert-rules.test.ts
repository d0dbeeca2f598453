// The chart's alerts (helm/vmop/files/prometheus-rules.yaml) through Prometheus' own promtool
// (Debian's prometheus package): the rules load, every alert fires when its unit tests
// (test/alerts/) say and not before, and every alert has its runbook and its tests; the Grafana
// dashboard's queries are valid PromQL (that they read exported series: operator/vm-controller).
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import {
  RULES_FILE as RULES,
  alertRules as rules,
  dashboardQueries,
  OVERVIEW_DASHBOARD,
  VM_DASHBOARD,
} from '../support/monitoring.js';

const run = promisify(execFile);
const TESTS = 'test/alerts/vmop-rules.test.yaml';

describe("the chart's alert rules and dashboard", () => {
  it('load in promtool, and pass their unit tests', async () => {
    const checked = await run('promtool', ['check', 'rules', RULES]);
    expect(checked.stdout).toContain(`SUCCESS: ${rules.length} rules found`);
    const tested = await run('promtool', ['test', 'rules', TESTS]);
    expect(tested.stdout).toContain('SUCCESS');
  });

  it('each have a runbook, and a test where they fire and one where they do not', () => {
    const tests = (
      parse(readFileSync(TESTS, 'utf8')) as {
        tests: Array<{ alert_rule_test: Array<{ alertname: string; exp_alerts: unknown[] }> }>;
      }
    ).tests.flatMap((test) => test.alert_rule_test);
    for (const rule of rules) {
      expect(rule.annotations.runbook_url).toMatch(new RegExp(`/docs/runbooks/${rule.alert}\\.md$`));
      expect(existsSync(`docs/runbooks/${rule.alert}.md`), `docs/runbooks/${rule.alert}.md`).toBe(true);
      const cases = tests.filter((test) => test.alertname === rule.alert);
      expect(
        cases.some((test) => test.exp_alerts.length > 0),
        `${rule.alert} fires in a test`,
      ).toBe(true);
      expect(
        cases.some((test) => test.exp_alerts.length === 0),
        `${rule.alert} stays quiet in a test`,
      ).toBe(true);
    }
  });

  it('has dashboards whose queries are valid PromQL (promtool checks them as recording rules)', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'vmop-dashboard-'));
    const file = path.join(dir, 'queries.yaml');
    const queries = [...dashboardQueries(OVERVIEW_DASHBOARD), ...dashboardQueries(VM_DASHBOARD)];
    const records = queries.map((query, i) => ({
      record: `vmop_dashboard:query_${i}`,
      expr: query.expr,
    }));
    await writeFile(file, stringify({ groups: [{ name: 'dashboard', rules: records }] }));
    try {
      const checked = await run('promtool', ['check', 'rules', file]);
      expect(checked.stdout).toContain(`SUCCESS: ${records.length} rules found`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
