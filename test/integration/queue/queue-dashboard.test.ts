import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import type { Browser } from 'playwright-core';
import { launchChromium } from '../../support/browser.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../../src/util/free-port.js';
import { QueueHarness } from './harness.js';

const VMOP = fileURLToPath(new URL('../../../bin/vmop', import.meta.url));

describe('vmop queue dashboard', () => {
  let harness: QueueHarness;
  let browser: Browser;
  const dashboards: ChildProcess[] = [];
  const broken = 'vm:dash/broken';

  /** Starts `vmop queue dashboard` and resolves with its URL once it listens. */
  async function startDashboard(extraArgs: string[] = []): Promise<string> {
    const port = await freePort();
    const child = harness.spawn(VMOP, ['queue', 'dashboard', '--port', String(port), ...extraArgs], {
      env: { ...process.env, REDIS_URL: harness.queueRedis.url, VMOP_LOG_LEVEL: 'warn' },
    });
    dashboards.push(child);
    let output = '';
    child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    return new Promise((resolve, reject) => {
      child.stdout!.on('data', (chunk: Buffer) => {
        output += chunk.toString();
        const url = /Dashboard for queue vmop: (\S+)/.exec(output)?.[1];
        if (url) resolve(url);
      });
      child.once('exit', (code) => reject(new Error(`dashboard exited with ${code}: ${output}`)));
    });
  }

  beforeAll(async () => {
    harness = await QueueHarness.start();
    await harness.spawnWorker({ backoff: { baseMs: 3_600_000, capMs: 3_600_000 } });
    await harness.setBehaviour(broken, { terminal: true });
    await harness.producer.addMany([broken, 'vm:dash/fine']);
    await harness.waitFor('both runs', async () => (await harness.runs()).length === 2);
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    for (const child of dashboards) {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        await once(child, 'exit');
      }
    }
    await harness?.stop();
  });

  it('lists the queue and shows why a key failed, and refuses changes', async () => {
    const url = await startDashboard();
    const page = await browser.newPage();
    await page.goto(url);
    await expect.poll(() => page.locator('body').innerText()).toMatch(/vmop[\s\S]*FAILED\s*1/);

    await page.goto(new URL('queue/vmop?status=failed', url).href);
    await page.getByText(`terminal failure of ${broken}`).first().waitFor();
    expect(await page.getByText(broken, { exact: true }).count()).toBeGreaterThan(0);
    expect(await page.getByRole('button', { name: /retry/i }).count()).toBe(0);

    const [job] = await harness.inspector.bullQueue.getFailed();
    const retry = await fetch(new URL(`api/queues/vmop/${job!.id}/retry`, url), { method: 'PUT' });
    expect(retry.status).toBe(405);
    await page.close();
  });

  it('with --allow-retries, retries a failed key through vmop and still refuses other changes', async () => {
    const url = await startDashboard(['--allow-retries']);
    await harness.setBehaviour(broken, {});
    const page = await browser.newPage();
    await page.goto(new URL('queue/vmop?status=failed', url).href);
    await page.getByText(`terminal failure of ${broken}`).first().waitFor();
    await page.getByRole('button', { name: 'Retry all' }).click();
    await page.getByRole('button', { name: 'Confirm' }).click();
    await harness.waitFor('the retried run', async () => (await harness.runs(broken)).length === 2);
    await harness.waitForIdle();
    expect(await harness.inspector.list()).toEqual([]);
    expect(await harness.inspector.bullQueue.getFailedCount()).toBe(0);

    const clean = await fetch(new URL('api/queues/vmop/clean/completed', url), { method: 'PUT' });
    expect(clean.status).toBe(405);
    await page.close();
  });
});
