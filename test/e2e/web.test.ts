// The web GUI end to end on `vmop dev` (its Dex, both manager replicas, a real node running TCG
// guests), driven in headless Chromium as people use it: log in at Dex, see what they may, start a
// VM and watch it run without a reload, get VMs from a pool at once, be refused, log out.
import { readFile } from 'node:fs/promises';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testGuestManifest } from '../support/cluster-vms.js';
import { devBed } from '../support/dev-bed.js';
import { launchChromium, logIn, type LoggedIn } from '../support/browser.js';

const NAMESPACE = 'web-e2e';
const bed = devBed('web', NAMESPACE);

const grants = (lines: string) => `  permissions:\n${lines}`;
const stoppedVm = (name: string, extraSpec = '') =>
  testGuestManifest(name, NAMESPACE, { extraSpec }).replace('state: Running', 'state: Stopped');
const card = (page: Page, vm: string) => page.locator(`[data-vm="${NAMESPACE}/${vm}"]`);
const shownVms = async (page: Page) =>
  (
    await page.locator('[data-vm]').evaluateAll((cards) => cards.map((c) => c.getAttribute('data-vm')))
  ).sort();
/** The GUI's API as the page calls it: with the page's cookie, and its CSRF token unless told. */
const callApi = (
  page: Page,
  method: string,
  path: string,
  options: { csrf?: boolean; body?: unknown } = {},
) =>
  page.evaluate(
    async ({ method, path, csrf, body }) => {
      const me = (await (await fetch('/api/me')).json()) as { csrf: string };
      const headers: Record<string, string> = {};
      if (csrf) headers['X-CSRF-Token'] = me.csrf;
      if (body) headers['Content-Type'] = 'application/json';
      const response = await fetch(path, { method, headers, body: body ? JSON.stringify(body) : undefined });
      return { status: response.status, body: await response.text() };
    },
    { method, path, csrf: options.csrf ?? true, body: options.body },
  );

describe('web GUI: logins, live views, pools, permissions', () => {
  let browser: Browser;
  let url: string;
  const people: Record<string, LoggedIn> = {};

  beforeAll(async () => {
    url = bed.env.state.web.urls[0]!;
    await bed.vms.kubectl(['create', 'namespace', NAMESPACE]).catch(() => undefined);
    await bed.vms.apply(
      [
        stoppedVm('alices', grants('  - user: alice\n    may: [start, stop, accessConsole]\n')),
        stoppedVm('teams', grants('  - role: users\n    may: ["*"]\n')),
        stoppedVm('secret'),
        ...['pooled-1', 'pooled-2'].map((name) => stoppedVm(name, '  pools: [class]\n')),
        `apiVersion: vmoperator.jdrupes.org/v1
kind: VmPool
metadata: {name: class, namespace: ${NAMESPACE}}
spec:
  retention: PT1h
  permissions:
  - role: users
    may: [accessConsole, start]
`,
      ].join('---\n'),
    );
    browser = await launchChromium();
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
  });

  it('logs people in at the OpenID Connect provider, with a session cookie the page cannot read', async () => {
    people.alice = await logIn(browser, url, 'alice');
    const { page, context } = people.alice;
    expect(new URL(page.url()).origin).toBe(url);
    await expect(page.locator('[data-user]').textContent()).resolves.toBe('Alice');
    const [session] = (await context.cookies()).filter((c) => c.name === 'vmop_session');
    expect(session).toMatchObject({ httpOnly: true, secure: true, sameSite: 'Lax' });
    expect(await page.evaluate('document.cookie')).not.toContain(session!.value);
    expect(await page.content()).not.toContain(session!.value);
  });

  it('shows a person just the VMs and pools they may use, with just the buttons they may press', async () => {
    const { page } = people.alice!;
    await expect.poll(() => shownVms(page)).toEqual([`${NAMESPACE}/alices`, `${NAMESPACE}/teams`]);
    expect(await card(page, 'alices').locator('button').allTextContents()).toEqual(['Start']);
    expect(await card(page, 'teams').locator('button').allTextContents()).toEqual(['Start']);
    await expect(page.locator(`[data-pool="${NAMESPACE}/class"]`).textContent()).resolves.toContain(
      '0 of 2 in use',
    );
    people.carol = await logIn(browser, url, 'carol');
    await people.carol.page.getByText('You have no VMs.').waitFor();
    expect(await people.carol.page.locator('[data-pool]').count()).toBe(0);
  });

  it('starts a VM for the person who clicks, and the card turns Running without a reload', async () => {
    const { page } = people.alice!;
    const before = await page.evaluate(() => performance.timeOrigin);
    await card(page, 'alices').getByRole('button', { name: 'Start' }).click();
    await expect
      .poll(() => card(page, 'alices').locator('[data-phase]').textContent(), { timeout: 180_000 })
      .toBe('Running');
    expect(await page.evaluate(() => performance.timeOrigin)).toBe(before); // the same page, never reloaded
    expect(await card(page, 'alices').locator('button').allTextContents()).toEqual(['Stop']);
    expect(await bed.vms.eventMessages('alices')).toContain('RequestedInWebGui: alice asked to start it');
    const operations = JSON.parse(
      await bed.vms.kubectl(['get', 'virtualmachineoperations', '-o', 'json']),
    ).items;
    expect(operations).toContainEqual(
      expect.objectContaining({
        metadata: expect.objectContaining({
          annotations: { 'vmoperator.jdrupes.org/requested-by': 'alice' },
        }),
        spec: { virtualMachineName: 'alices', type: 'Start' },
      }),
    );
  });

  it('gives two people who ask at once two VMs of a pool, and starts them', async () => {
    people.bob = await logIn(browser, bed.env.state.web.urls[1]!, 'bob'); // the other replica
    const pool = (who: LoggedIn) => who.page.locator(`[data-pool="${NAMESPACE}/class"]`);
    await Promise.all([
      pool(people.alice!).getByRole('button', { name: 'Get a VM' }).click(),
      pool(people.bob).getByRole('button', { name: 'Get a VM' }).click(),
    ]);
    const assigned = await Promise.all(
      [people.alice!, people.bob].map(async (who) => {
        await pool(who).locator('[data-assigned]').waitFor();
        return pool(who).locator('[data-assigned]').textContent();
      }),
    );
    expect([...assigned].sort()).toEqual(['pooled-1', 'pooled-2']);
    for (const [user, vm] of [
      ['alice', assigned[0]!],
      ['bob', assigned[1]!],
    ] as const) {
      const status = JSON.parse(
        await bed.vms.kubectl(['get', 'vm', vm, '-o', 'jsonpath={.status.assignment}']),
      );
      expect(status).toMatchObject({ pool: 'class', user });
    }
    // each sees their pool VM as a card (the pool's grants), started for them
    await expect
      .poll(() => card(people.bob!.page, assigned[1]!).locator('[data-phase]').textContent(), {
        timeout: 180_000,
      })
      .toBe('Running');
    await expect(pool(people.alice!).textContent()).resolves.toContain('2 of 2 in use');
  });

  it('refuses what a person may not do, in the API behind the GUI too', async () => {
    const { page } = people.alice!;
    // alice may start and stop hers, not reset it
    expect(await callApi(page, 'POST', `/api/vms/${NAMESPACE}/alices/reset`)).toEqual({
      status: 403,
      body: JSON.stringify({ message: 'you may not reset alices' }),
    });
    // a VM she may not see does not exist for her
    expect((await callApi(page, 'POST', `/api/vms/${NAMESPACE}/secret/start`)).status).toBe(404);
    // without the login's CSRF token nothing changes
    expect((await callApi(page, 'POST', `/api/vms/${NAMESPACE}/alices/stop`, { csrf: false })).status).toBe(
      403,
    );
    expect((await bed.vms.getVm('alices')).spec.vm.state).toBe('Running');
    // carol has no grant on the pool
    expect(
      (await callApi(people.carol!.page, 'POST', `/api/pools/${NAMESPACE}/class/assignment`)).status,
    ).toBe(404);
  });

  it('shows an administrator (RBAC) every VM and lets them change CPUs, seen live', async () => {
    people.admin = await logIn(browser, `${url}/admin`, 'admin');
    const { page } = people.admin;
    expect(new URL(page.url()).pathname).toBe('/admin');
    await expect
      .poll(() => shownVms(page))
      .toEqual(['alices', 'pooled-1', 'pooled-2', 'secret', 'teams'].map((vm) => `${NAMESPACE}/${vm}`));
    const row = page.locator(`tr[data-vm="${NAMESPACE}/alices"]`);
    await expect(row.locator('[data-cpus]').textContent()).resolves.toBe('1');
    await row.getByLabel('CPUs of alices').fill('2');
    await row.getByLabel('CPUs of alices').press('Enter');
    await expect.poll(() => row.locator('[data-cpus]').textContent(), { timeout: 60_000 }).toBe('2');
    expect(await bed.vms.eventMessages('alices')).toContain('RequestedInWebGui: admin set currentCpus 2');
  });

  it('logs out: the same cookie opens nothing afterwards, at any replica', async () => {
    const { page, context } = people.alice!;
    const [session] = (await context.cookies()).filter((c) => c.name === 'vmop_session');
    await page.getByRole('button', { name: 'Log out' }).click();
    await page.waitForURL(/\/dex\//);
    for (const replica of bed.env.state.web.urls) {
      const response = await fetch(`${replica}/api/me`, {
        headers: { cookie: `vmop_session=${session!.value}` },
      });
      expect(response.status).toBe(401);
    }
  });

  it('writes no password, token or session to any log', async () => {
    const secrets = [bed.env.oidcProvider.clientSecret];
    for (const who of Object.values(people)) {
      secrets.push(who.csrf, who.session);
    }
    for (const log of bed.env.state.managers.map((m) => m.log)) {
      const text = await readFile(log, 'utf8');
      expect(text).toContain('logged in to the web GUI');
      for (const secret of secrets) expect(text).not.toContain(secret);
    }
  });
});
