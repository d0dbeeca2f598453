// npm run bench:web (its upload part) — a disk image uploaded into a VirtualMachineImage against
// the same file imported with `source.http` from `vmop dev`'s image server, on `vmop dev` (one node):
// seconds from the request to the image's Ready, and the throughput that makes (MiB/s). Uploads go
// through the apiserver (a port-forward to the importer pod), once by `vmop image upload` and once
// by the GUI's Images page in Chromium (its SHA-256 computed in the page). Each path is given the
// file's SHA-256, so each checks it. Runs alternate; each image is deleted before the next.
// BENCH_RUNS (default 3) runs of each, BENCH_UPLOAD_MIB (default 256) MiB of random data, raw.
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, open, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { startDevEnvironment } from '../../src/devenv/dev-environment.js';
import { launchChromium, logIn } from '../../test/support/browser.js';
import { clusterVms } from '../../test/support/cluster-vms.js';

const run = promisify(execFile);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const MIB = Number(process.env.BENCH_UPLOAD_MIB ?? 256);
const NAMESPACE = 'default';

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const row = (label: string, seconds: number[], baseline: number[]) => {
  const sorted = [...seconds].sort((a, b) => a - b);
  const throughput = MIB / median(seconds);
  const ratio = median(baseline) / median(seconds);
  return `${label.padEnd(30)} ${[sorted[0]!, median(seconds), sorted.at(-1)!].map((s) => `${s.toFixed(1).padStart(6)} s`).join(' ')}  ${throughput.toFixed(1).padStart(6)} MiB/s   ${ratio.toFixed(2)}×`;
};

async function main() {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'vmop-bench-upload-'));
  const env = await startDevEnvironment({ dir, kvm: false });
  const vms = clusterVms(env.state.kubeconfig, NAMESPACE);
  const browser = await launchChromium();
  const file = path.join(env.state.imageServer.dir, 'bench-upload.raw');
  try {
    // Random data: nothing for the import to skip (zero runs) or for the transport to compress.
    const handle = await open(file, 'w');
    for (let i = 0; i < MIB; i++) await handle.write(randomBytes(1024 * 1024));
    await handle.close();
    const sha256 = createHash('sha256')
      .update(await readFile(file))
      .digest('hex');
    const admin = await logIn(browser, `${env.state.web.urls[0]!}`, 'admin');
    const cliEnv = { ...process.env, KUBECONFIG: env.state.kubeconfig };

    /** Seconds from `make()` to the image's Ready; the image deleted afterwards. */
    const timed = async (name: string, make: () => Promise<void>) => {
      const started = performance.now();
      await make();
      for (;;) {
        const image = JSON.parse(await vms.kubectl(['get', 'vmimage', name, '-o', 'json'])) as {
          status?: { phase?: string; message?: string };
        };
        if (image.status?.phase === 'Ready') break;
        if (image.status?.phase === 'Failed') throw new Error(`${name}: ${image.status.message}`);
        if (performance.now() - started > 900_000) throw new Error(`${name} was not Ready within 900 s`);
        await sleep(200);
      }
      const seconds = (performance.now() - started) / 1000;
      await vms.kubectl(['delete', 'vmimage', name, '--wait']);
      return seconds;
    };
    const viaHttp = (name: string) => async () => {
      await vms.apply(`apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineImage
metadata: {name: ${name}}
spec:
  source: {http: {url: "${env.state.imageServer.url}/bench-upload.raw", sha256: "${sha256}"}}
  storage: {size: ${MIB}Mi}
`);
    };
    const viaCli = (name: string) => async () => {
      await run('bin/vmop', ['image', 'upload', file, '--name', name, '-n', NAMESPACE, '--no-wait'], {
        env: cliEnv,
      });
    };
    const viaGui = (name: string) => async () => {
      const { page } = admin;
      await page.goto(`${env.state.web.urls[0]!}/images`);
      const form = page.locator('[data-upload]');
      await form.locator('#upload-namespace').selectOption(NAMESPACE);
      await form.locator('#upload-file').setInputFiles(file);
      await form.locator('#upload-name').fill(name);
      await form.locator('[data-action="upload"]').click();
      await form.locator('[data-upload-progress]', { hasText: /^sent / }).waitFor({ timeout: 900_000 });
    };
    const results = { http: [] as number[], cli: [] as number[], gui: [] as number[] };
    // One of each first, not counted: the importer's first pod, the page's modules warm up.
    await timed('warm-http', viaHttp('warm-http'));
    await timed('warm-cli', viaCli('warm-cli'));
    await timed('warm-gui', viaGui('warm-gui'));
    for (let i = 0; i < RUNS; i++) {
      results.http.push(await timed(`http-${i}`, viaHttp(`http-${i}`)));
      results.cli.push(await timed(`cli-${i}`, viaCli(`cli-${i}`)));
      results.gui.push(await timed(`gui-${i}`, viaGui(`gui-${i}`)));
    }
    console.log(
      `\n${MIB} MiB raw image → Ready, ${RUNS} runs each, alternating (min/median/max, throughput of the median):`,
    );
    console.log(row('source.http (baseline)', results.http, results.http));
    console.log(row('vmop image upload', results.cli, results.http));
    console.log(row("the GUI's Images page upload", results.gui, results.http));
  } finally {
    await browser.close();
    await env.stop();
    await rm(file, { force: true });
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
