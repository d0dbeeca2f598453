// npm run bench:web (its last part) — a VM made with the GUI's New VM form against the same VM
// applied with kubectl, on `vmop dev` (one node): milliseconds from the request to the VM's status
// saying Running (its QEMU started; an empty system disk, so no import and no guest boot blur the
// comparison). The GUI adds a SubjectAccessReview and its HTTP round trip to what the apiserver and
// the managers do for both. Runs alternate (GUI, kubectl, …); each VM is deleted before the next.
// BENCH_RUNS (default 5) runs of each.
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { stringify } from 'yaml';
import { startDevEnvironment } from '../../src/devenv/dev-environment.js';
import { vmOfForm, type NewVmForm } from '../../src/web/create-form.js';
import { launchChromium, logIn } from '../../test/support/browser.js';
import { clusterVms } from '../../test/support/cluster-vms.js';

const run = promisify(execFile);
const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const NAMESPACE = 'default';

const stats = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return { min: sorted[0]!, median: sorted[Math.floor(sorted.length / 2)]!, max: sorted.at(-1)! };
};
const row = (label: string, values: number[], baseline: number[]) => {
  const { min, median, max } = stats(values);
  const ratio = median / stats(baseline).median;
  return `${label.padEnd(24)} ${[min, median, max].map((ms) => `${ms.toFixed(0).padStart(6)} ms`).join(' ')}   ${ratio.toFixed(2)}×`;
};

async function main() {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'vmop-bench-web-create-'));
  // Emulated, as the test beds: nested KVM on these machines crashes the guest (FACTS).
  const env = await startDevEnvironment({ dir, kvm: false });
  const vms = clusterVms(env.state.kubeconfig, NAMESPACE);
  const browser = await launchChromium();
  try {
    const admin = await logIn(browser, env.state.web.urls[0]!, 'admin');
    const form = (name: string): NewVmForm => ({
      namespace: NAMESPACE,
      name,
      cpus: 1,
      ram: '128Mi',
      firmware: 'bios',
      diskSize: '16Mi',
      source: { kind: 'empty' },
      start: true,
    });
    /** Milliseconds from `create()` to the VM's status saying Running; the VM deleted afterwards. */
    const timed = async (name: string, create: () => Promise<void>) => {
      const started = performance.now();
      await create();
      // Polled every 100 ms (a wait of the tests' polls 500 ms: too coarse here).
      while ((await vms.getVm(name).catch(() => undefined))?.status?.phase !== 'Running') {
        if (performance.now() - started > 300_000) throw new Error(`${name} did not run within 300 s`);
        await sleep(100);
      }
      const ms = performance.now() - started;
      // Stopped at once first: a deleted VM's pod would wait out its powerdownTimeout (an empty
      // disk's guest ignores the powerdown) and keep its CPU, and the next VMs would not fit.
      await run('bin/vmop', ['vm', 'stop', name, '--force', '--wait', '-n', NAMESPACE], {
        env: { ...process.env, KUBECONFIG: env.state.kubeconfig },
      });
      await vms.kubectl(['delete', 'vm', name, '--wait']);
      return ms;
    };
    const viaGui = (name: string) => async () => {
      const status = await admin.page.evaluate(
        async ({ body, csrf }) =>
          (
            await fetch('/api/vms', {
              method: 'POST',
              headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': csrf },
              body: JSON.stringify(body),
            })
          ).status,
        { body: form(name), csrf: admin.csrf },
      );
      if (status !== 201) throw new Error(`the GUI answered ${status}`);
    };
    const viaKubectl = (name: string) => async () => {
      await vms.apply(stringify(vmOfForm(form(name), {})));
    };
    const gui: number[] = [];
    const kubectl: number[] = [];
    // One of each first, not counted: images, caches and the runner's first start warm up.
    await timed('warm-gui', viaGui('warm-gui'));
    await timed('warm-kubectl', viaKubectl('warm-kubectl'));
    for (let run = 0; run < RUNS; run++) {
      gui.push(await timed(`gui-${run}`, viaGui(`gui-${run}`)));
      kubectl.push(await timed(`kubectl-${run}`, viaKubectl(`kubectl-${run}`)));
    }
    console.log(`\nNew VM → Running (an empty disk, TCG), ${RUNS} runs each, alternating:`);
    console.log(`${''.padEnd(24)} ${['min', 'median', 'max'].map((h) => h.padStart(9)).join(' ')}   ratio`);
    console.log(row('kubectl apply (baseline)', kubectl, kubectl));
    console.log(row("the GUI's New VM form", gui, kubectl));
  } finally {
    await browser.close();
    await env.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
