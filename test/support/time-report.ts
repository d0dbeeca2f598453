// A vitest reporter that ends every run with where its time went: each tier's wall time (first
// file started to last file ended) and summed file time, the slowest files, and for each e2e bed
// file (test/support/beds.ts) its suites' times and what starting and stopping its bed took. CI
// logs then show what a landing added, without timing anything inside a test.
import path from 'node:path';
import type { Reporter, TestModule, TestSuite } from 'vitest/node';

const SLOWEST = 15;

interface Timed {
  name: string;
  startedAt: number;
  endedAt: number;
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(0).padStart(6)} s`;
const took = (t: Timed) => t.endedAt - t.startedAt;

export default class TimeReport implements Reporter {
  private runStartedAt = Date.now();
  private readonly files: Array<Timed & { tier: string }> = [];
  /** The top-level suites of each file, by module id. */
  private readonly suites = new Map<string, Timed[]>();
  private readonly suiteStarts = new Map<string, number>();

  onTestRunStart(): void {
    this.runStartedAt = Date.now();
  }

  onTestSuiteReady(suite: TestSuite): void {
    if (suite.parent.type === 'module') this.suiteStarts.set(suite.id, Date.now());
  }

  onTestSuiteResult(suite: TestSuite): void {
    const startedAt = this.suiteStarts.get(suite.id);
    if (suite.parent.type !== 'module' || startedAt === undefined) return;
    const list = this.suites.get(suite.module.moduleId) ?? [];
    list.push({ name: suite.name, startedAt, endedAt: Date.now() });
    this.suites.set(suite.module.moduleId, list);
  }

  onTestModuleEnd(module: TestModule): void {
    const endedAt = Date.now();
    // A file's time: importing it (and what it imports), its hooks and its tests.
    const d = module.diagnostic();
    const ms =
      d.environmentSetupDuration + d.prepareDuration + d.setupDuration + d.collectDuration + d.duration;
    this.files.push({
      tier: module.project.name || 'default',
      name: path.relative(process.cwd(), module.moduleId),
      startedAt: endedAt - ms,
      endedAt,
    });
  }

  onTestRunEnd(): void {
    if (this.files.length === 0) return;
    const lines = ['', `Time report (whole run ${seconds(Date.now() - this.runStartedAt).trim()})`];
    lines.push('  tier          wall       files summed   files');
    for (const tier of [...new Set(this.files.map((f) => f.tier))]) {
      const of = this.files.filter((f) => f.tier === tier);
      const wall = Math.max(...of.map((f) => f.endedAt)) - Math.min(...of.map((f) => f.startedAt));
      const summed = of.reduce((sum, f) => sum + took(f), 0);
      lines.push(
        `  ${tier.padEnd(12)}${seconds(wall)}   ${seconds(summed)}   ${String(of.length).padStart(5)}`,
      );
    }
    lines.push(`  the ${Math.min(SLOWEST, this.files.length)} slowest files:`);
    for (const f of [...this.files].sort((a, b) => took(b) - took(a)).slice(0, SLOWEST))
      lines.push(`  ${seconds(took(f))}  ${f.tier.padEnd(12)} ${f.name}`);
    for (const file of this.files.filter((f) => path.basename(f.name).endsWith('-bed.test.ts'))) {
      const suites = this.suites.get(path.resolve(file.name)) ?? [];
      const inSuites = suites.reduce((sum, s) => sum + took(s), 0);
      lines.push(`  ${file.name}: ${seconds(took(file)).trim()}`);
      lines.push(`  ${seconds(took(file) - inSuites)}  the bed: starting, stopping, checking what it left`);
      for (const suite of suites) lines.push(`  ${seconds(took(suite))}  ${suite.name}`);
    }
    process.stdout.write(`${lines.join('\n')}\n`);
  }
}
