// The web GUI end to end on `vmop dev` (its Dex, both manager replicas, a real node running TCG
// guests), driven in headless Chromium as people use it: log in at Dex, see what they may, start a
// VM and watch it run without a reload, get VMs from a pool at once, be refused, log out.
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { request as httpRequest } from 'node:http';
import { Redis } from 'ioredis';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseMemorySize } from '../../src/api/runner-config.js';
import { DEV_PASSWORD } from '../../src/devenv/oidc-provider.js';
import { testGuestManifest } from '../support/cluster-vms.js';
import { eventually } from '../support/eventually.js';
import { useDevBed, type DevBed } from '../support/beds.js';
import { launchChromium, logIn, type LoggedIn } from '../support/browser.js';
import { startForwarding } from '../support/forwarding.js';
import { vncLogin } from '../support/vnc-login.js';

const NAMESPACE = 'web-e2e';
/** Where the admin table's many rows are (their VMs go when the test ends). */
const ROWS_NAMESPACE = 'web-rows';
/** Where bob may create VMs (RBAC `edit`), and nobody else of the web suite. */
const CREATE_NAMESPACE = 'web-create';
/** The image bob uploads in the browser, and the New VM form's VM boots from. */
const UPLOADED_IMAGE = 'uploaded-guest';
/** Set when the suite is collected (its describe), before any test. */
let bed: DevBed;

const grants = (lines: string) => `  permissions:\n${lines}`;
const SPICE_PORT = 5941;
const VNC_PORT = 5942;
const stoppedVm = (name: string, extraSpec = '', displays: { spicePort?: number; vncPort?: number } = {}) =>
  testGuestManifest(name, NAMESPACE, { extraSpec, ...displays }).replace('state: Running', 'state: Stopped');
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

/** A page with the VM's serial console open (its terminal ready for keys). */
async function openSerial(context: BrowserContext): Promise<Page> {
  const page = await context.newPage();
  await page.goto(`${bed.state().web.urls[0]}/console/${NAMESPACE}/alices?view=serial`);
  // The state's text first (it is gone once connected): run38 saw it stay for 30 s, and stop 65's
  // CI saw the terminal stay unready for 30 s with nothing to say why.
  await page.locator('[data-terminal]').waitFor({ state: 'attached' });
  await expect
    .poll(() => page.locator('[data-serial-state]').allTextContents(), { timeout: 60_000 })
    .toEqual([]);
  await page.locator('[data-terminal] .xterm-helper-textarea').waitFor();
  return page;
}
const MiB = 1024 ** 2;
/** SPICE one-time passwords the GUI handed out (recorded from its answers): in no log or URL. */
const displayPasswords: string[] = [];
/** A page with the VM's SPICE display open, as `who` sees it; the display's canvas drawn. */
async function openDisplay(context: BrowserContext, view: 'display' | 'vnc' = 'display'): Promise<Page> {
  const page = await context.newPage();
  page.on('response', async (response) => {
    if (/\/console\/(spice|vnc)$/.test(response.url()) && response.ok())
      displayPasswords.push(((await response.json()) as { password: string }).password);
  });
  const consoleMessages: string[] = [];
  page.on('console', (message) => consoleMessages.push(`${message.type()}: ${message.text()}`));
  await page.goto(`${bed.state().web.urls[0]}/console/${NAMESPACE}/alices?view=${view}`);
  const [canvas, state] =
    view === 'vnc'
      ? ['[data-vnc] canvas', '[data-vnc-state]']
      : ['#spice-screen canvas', '[data-display-state]'];
  try {
    await page.locator(canvas).first().waitFor({ timeout: 60_000 });
    if (view === 'vnc')
      await expect.poll(() => page.locator(state).allTextContents(), { timeout: 60_000 }).toEqual([]);
  } catch (err) {
    // Seen once in CI (not reproduced): say what the page showed, for whoever meets it again.
    const says = await page.locator(state).allTextContents();
    throw new Error(
      `no ${view} canvas: the page says ${JSON.stringify(says)}; its console: ${JSON.stringify(consoleMessages.slice(-20))}`,
      { cause: err },
    );
  }
  return page;
}
/** What the tests read of the page's document (the project's types have no DOM). */
interface PageGlobals {
  document: { documentElement: { scrollWidth: number; clientWidth: number }; activeElement: unknown };
}
const typeInto = async (page: Page, keys: string) => {
  await page.locator('[data-terminal] .xterm-helper-textarea').focus();
  await page.keyboard.type(keys.replace(/\r$/, ''));
  if (keys.endsWith('\r')) await page.keyboard.press('Enter');
};
const terminalText = (page: Page) => page.locator('[data-terminal] .xterm-rows').innerText();

describe('web GUI: logins, live views, pools, permissions, consoles', () => {
  bed = useDevBed('dev', { namespaces: [NAMESPACE, ROWS_NAMESPACE, CREATE_NAMESPACE] });
  let browser: Browser;
  let url: string;
  const people: Record<string, LoggedIn> = {};
  /** Console tickets seen: they must appear in no log and no URL. */
  const consoleTickets: string[] = [];

  beforeAll(async () => {
    url = bed.state().web.urls[0]!;
    await bed.vms(NAMESPACE).apply(
      [
        // With a NIC (QEMU's user network): its guest agent reports the address the GUI shows.
        stoppedVm(
          'alices',
          grants('  - user: alice\n    may: [start, stop, accessConsole]\n  - user: bob\n    may: [start]\n'),
          { spicePort: SPICE_PORT, vncPort: VNC_PORT },
        ).replace('networks: []', 'networks: [{user: {}}]'),
        stoppedVm('teams', grants('  - role: users\n    may: ["*"]\n')),
        stoppedVm('secret'),
        ...['pooled-1', 'pooled-2'].map((name) => stoppedVm(name, '  pools: [class]\n')),
        `apiVersion: vmoperator.jdrupes.org/v1
kind: VmPool
metadata: {name: class, namespace: ${NAMESPACE}}
spec:
  retention: PT1h
  loginOnAssignment: true
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
    expect(await bed.vms(NAMESPACE).eventMessages('alices')).toContain(
      'RequestedInWebGui: alice asked to start it',
    );
    const operations = JSON.parse(
      await bed.vms(NAMESPACE).kubectl(['get', 'virtualmachineoperations', '-o', 'json']),
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

  it.each([
    ['SPICE', 'display', '#spice-screen canvas'],
    ['VNC (noVNC)', 'vnc', '[data-vnc] canvas'],
  ] as const)(
    "shows the VM's %s display in the page, and its screen changes when the guest writes to it",
    async (_name, view, canvasSelector) => {
      const { context } = people.alice!;
      const display = await openDisplay(context, view);
      const canvas = display.locator(canvasSelector).first();
      const screen = () => canvas.evaluate((c) => (c as unknown as { toDataURL(): string }).toDataURL());
      // What the screen shows while the guest writes nothing: its text, with the cursor blinking on
      // and off (QEMU draws VGA text mode with a blinking cursor), so at most two pictures.
      await display.waitForTimeout(2_000); // the first frames have arrived
      const serial = await openSerial(context);
      const idle = new Set<string>();
      for (let sample = 0; sample < 16; sample++) {
        idle.add(await screen());
        await display.waitForTimeout(250);
      }
      expect(idle.size).toBeLessThanOrEqual(2);
      await typeInto(serial, `echo VMOP-ON-THE-${view.toUpperCase()} > /dev/tty0\r`);
      await expect.poll(async () => idle.has(await screen()), { timeout: 30_000 }).toBe(false);
      await serial.close();
      await display.close();
    },
  );

  it('`vmop vm vnc` forwards a local port to the VNC display, its one-time password in a .vv file and nowhere else', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'vmop-vnc-'));
    const file = path.join(dir, 'alices.vv');
    const forwarding = startForwarding(
      'bin/vmop',
      ['vm', 'vnc', 'alices', '-n', NAMESPACE, '-o', file],
      bed.env(NAMESPACE),
    );
    try {
      const port = await forwarding.port;
      const vv = Object.fromEntries(
        (await readFile(file, 'utf8'))
          .split('\n')
          .filter((line) => line.includes('='))
          .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
      );
      expect((await stat(file)).mode & 0o777).toBe(0o600);
      expect(vv).toMatchObject({
        type: 'vnc',
        host: '127.0.0.1',
        port: String(port),
        title: `${NAMESPACE}/alices`,
      });
      expect(forwarding.said()).not.toContain(vv.password);
      expect((await vncLogin(port, 'not-the-password')).result).toBe(1);
      expect(await vncLogin(port, vv.password!)).toMatchObject({
        result: 0,
        screen: { width: 720, height: 400 },
      });
    } finally {
      forwarding.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });

  /** How many serial console relays run in alices' runner pod (each session is one). */
  const relaysOfAlices = async () =>
    Number(
      await bed.vms(NAMESPACE).exec('alices', [
        'node',
        '-e',
        `const fs = require('fs');
          console.log(fs.readdirSync('/proc').filter((p) => /^\\d+$/.test(p) && p !== String(process.pid))
            .filter((p) => { try { return fs.readFileSync('/proc/' + p + '/cmdline', 'utf8').includes('\\0serial-console\\0') } catch { return false } }).length)`,
      ]),
    );

  it('types into the serial console in the page and shows the answer; another person taking it over is told', async () => {
    const serial = await openSerial(people.alice!.context);
    await typeInto(serial, 'echo $((6*7))-VMOP\r');
    await expect.poll(() => terminalText(serial), { timeout: 30_000 }).toContain('42-VMOP');
    people.admin = await logIn(browser, url, 'admin');
    const takeover = await openSerial(people.admin.context);
    await expect
      .poll(() => terminalText(serial), { timeout: 30_000 })
      .toContain('[vmop: this console session was taken over by another one]');
    // One relay in the runner pod: alice's ended when it was displaced; the admin's ends with his page.
    await expect.poll(() => relaysOfAlices(), { timeout: 30_000 }).toBe(1);
    await takeover.close();
    await expect.poll(() => relaysOfAlices(), { timeout: 30_000 }).toBe(0);
    await serial.close();
  });

  it('opening the display another person has takes it over, and they are told', async () => {
    const alices = await openDisplay(people.alice!.context);
    await expect
      .poll(() => alices.locator('[data-display-state]').allTextContents(), { timeout: 30_000 })
      .toEqual([]);
    const admins = await openDisplay(people.admin!.context);
    await expect
      .poll(() => alices.locator('[data-display-state]').textContent(), { timeout: 30_000 })
      .toBe('Someone else opened this display and took it over. Reload the page to take it back.');
    await expect
      .poll(() => admins.locator('[data-display-state]').allTextContents(), { timeout: 30_000 })
      .toEqual([]);
    await alices.close();
    await admins.close();
  });

  it('switching console tabs before a console connected leaves no error in the page and no session behind', async () => {
    const page = await people.alice!.context.newPage();
    const pageErrors: string[] = [];
    page.on('pageerror', (err) => pageErrors.push(err.message));
    // The consoles' requests held until the person has switched tabs, as a slow network does: the
    // browser's own requests delayed (no stand-in for vmop). Once threw "Cannot read properties of
    // null (reading 'removeChild')" (issue 56), and a serial socket opened for a tab left behind.
    const held: Array<() => Promise<void>> = [];
    const consoleRequests = /\/api\/vms\/[^/]+\/alices\/console\/(spice|serial)$/;
    await page.route(consoleRequests, (route) =>
      held.length < 2 ? void held.push(() => route.continue()) : route.continue(),
    );
    await page.goto(`${url}/console/${NAMESPACE}/alices`); // the display first: alices has one
    await expect.poll(() => held.length).toBe(1);
    await page.getByRole('tab', { name: 'Serial console' }).click();
    await expect.poll(() => held.length).toBe(2);
    await page.getByRole('tab', { name: 'Display' }).click(); // back, before either answered
    await page.locator('#spice-screen canvas').first().waitFor({ timeout: 60_000 });
    for (const answer of held.splice(0)) await answer(); // the answers for the tabs left
    // The display stays this page's (a second connection would take it over), and no serial
    // relay runs for the serial tab that was left.
    await page.waitForTimeout(3_000);
    expect(await page.locator('[data-display-state]').allTextContents()).toEqual([]);
    expect(await page.locator('#spice-screen canvas').count()).toBeGreaterThan(0);
    expect(await relaysOfAlices()).toBe(0);
    expect(pageErrors).toEqual([]);
    await page.close();
  });

  it('refuses a console without the permission, also on the WebSocket called directly', async () => {
    people.bob = await logIn(browser, bed.state().web.urls[1]!, 'bob'); // the other replica
    const { page } = people.bob;
    await card(page, 'alices').waitFor(); // bob may start it, not open its console
    expect(await card(page, 'alices').getByText('Console').count()).toBe(0);
    expect(await callApi(page, 'POST', `/api/vms/${NAMESPACE}/alices/console/serial`)).toEqual({
      status: 403,
      body: JSON.stringify({ message: 'you may not open the console of alices' }),
    });
    // alice's ticket (an HttpOnly cookie for that console's path alone; the answer names the path)
    // is no good with bob's login, nor without one, nor for another console, nor after it was used
    const serialPath = `/api/console/serial/${NAMESPACE}/alices`;
    const ticket = async () => {
      const answer = await callApi(people.alice!.page, 'POST', `/api/vms/${NAMESPACE}/alices/console/serial`);
      expect(JSON.parse(answer.body)).toEqual({ url: serialPath });
      const cookie = (await people.alice!.context.cookies(`${url}${serialPath}`)).find(
        (c) => c.name === 'vmop_console',
      );
      expect(cookie).toMatchObject({ httpOnly: true, sameSite: 'Strict', path: serialPath });
      consoleTickets.push(cookie!.value);
      return cookie!.value;
    };
    const upgrade = (replica: string, path: string, cookie?: string) =>
      new Promise<number>((resolve) => {
        const socket = new WebSocket(`${replica.replace('http', 'ws')}${path}`, {
          headers: { origin: replica, ...(cookie && { cookie }) },
        });
        socket.on('open', () => {
          socket.close();
          resolve(101);
        });
        socket.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
        socket.on('error', () => resolve(-1));
      });
    const bobCookie = `vmop_session=${people.bob.session}`;
    const aliceCookie = `vmop_session=${people.alice!.session}`;
    const aliceTicket = `vmop_console=${await ticket()}`;
    expect(await upgrade(url, serialPath, `${bobCookie}; ${aliceTicket}`)).toBe(403);
    expect(await upgrade(url, serialPath, aliceTicket)).toBe(403);
    expect(await upgrade(url, serialPath, aliceCookie)).toBe(403);
    expect(
      await upgrade(url, `/api/console/serial/${NAMESPACE}/teams`, `${aliceCookie}; ${aliceTicket}`),
    ).toBe(403);
    expect(await upgrade(url, serialPath, `${aliceCookie}; ${aliceTicket}`)).toBe(101);
    expect(await upgrade(url, serialPath, `${aliceCookie}; ${aliceTicket}`)).toBe(403); // once
    expect(
      await upgrade(url, `/api/console/spice/${NAMESPACE}/alices`, `${aliceCookie}; vmop_console=made-up`),
    ).toBe(403);
  });

  /**
   * The serial console of alices as a script would open it (the person's login and a ticket, no
   * page): how it ends shows what the server does, whatever a page would do on its own.
   */
  const serialSocket = async (who: LoggedIn) => {
    const serialPath = `/api/console/serial/${NAMESPACE}/alices`;
    const answer = await callApi(who.page, 'POST', `/api/vms/${NAMESPACE}/alices/console/serial`);
    expect(answer.status).toBe(200);
    const ticket = (await who.context.cookies(`${url}${serialPath}`)).find((c) => c.name === 'vmop_console');
    consoleTickets.push(ticket!.value);
    const socket = new WebSocket(`${url.replace('http', 'ws')}${serialPath}`, {
      headers: { origin: url, cookie: `vmop_session=${who.session}; vmop_console=${ticket!.value}` },
    });
    let ended: { code: number; reason: string } | undefined;
    socket.on('close', (code, reason) => (ended = { code, reason: String(reason) }));
    await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
    return { socket, ended: () => ended };
  };

  it('a console another person uses is taken over only with takeConsole; one whose permission goes ends', async () => {
    const vms = bed.vms(NAMESPACE);
    const permissions = (carol: string) =>
      JSON.stringify({
        spec: {
          permissions: [
            { user: 'alice', may: ['start', 'stop', 'accessConsole'] },
            { user: 'bob', may: ['start'] },
            ...(carol ? [{ user: 'carol', may: [carol] }] : []),
          ],
        },
      });
    const carol = people.carol!;
    const carolOpens = () => callApi(carol.page, 'POST', `/api/vms/${NAMESPACE}/alices/console/serial`);
    await vms.kubectl(['patch', 'vm', 'alices', '--type=merge', '-p', permissions('accessConsole')]);
    await card(carol.page, 'alices').waitFor();
    const alices = await openSerial(people.alice!.context);
    // VM-Operator's rule: in use by another person, the console is refused without takeConsole.
    expect(await carolOpens()).toEqual({
      status: 409,
      body: JSON.stringify({
        message: 'alice uses the serial console of alices; taking it over needs the takeConsole permission',
      }),
    });
    await typeInto(alices, 'echo still-$((2+3))-alices\r');
    await expect.poll(() => terminalText(alices), { timeout: 30_000 }).toContain('still-5-alices');
    // Once alice closed hers, carol may open it; with takeConsole she takes it from alice.
    await alices.close();
    await expect.poll(async () => (await carolOpens()).status, { timeout: 10_000 }).toBe(200);
    await vms.kubectl(['patch', 'vm', 'alices', '--type=merge', '-p', permissions('takeConsole')]);
    const alicesAgain = await openSerial(people.alice!.context);
    await expect.poll(async () => (await carolOpens()).status, { timeout: 10_000 }).toBe(200);
    const carols = await serialSocket(carol);
    await expect
      .poll(() => terminalText(alicesAgain), { timeout: 30_000 })
      .toContain('[vmop: this console session was taken over by another one]');
    await alicesAgain.close();
    // Her grant taken away, her open console ends (permissions are checked again every 10 s).
    await vms.kubectl(['patch', 'vm', 'alices', '--type=merge', '-p', permissions('')]);
    await expect
      .poll(carols.ended, { timeout: 60_000 })
      .toEqual({ code: 4003, reason: 'you may no longer use this console' });
  });

  it("ends an open console when the person's login expires", async () => {
    const alice = await logIn(browser, url, 'alice');
    const serial = await serialSocket(alice);
    // Redis expires the login as it would at its idle or maximum age, just sooner.
    const redis = new Redis(bed.state().redisUrl);
    try {
      const key = `vmop:web:session:${createHash('sha256').update(alice.session).digest('hex')}`;
      expect(await redis.expire(key, 1)).toBe(1);
    } finally {
      redis.disconnect();
    }
    await expect
      .poll(serial.ended, { timeout: 30_000 })
      .toEqual({ code: 4002, reason: 'your login ended (logged out or expired)' });
    await alice.context.close();
  });

  it('gives two people who ask at once two VMs of a pool, and starts them', async () => {
    const pool = (who: LoggedIn) => who.page.locator(`[data-pool="${NAMESPACE}/class"]`);
    await Promise.all([
      pool(people.alice!).getByRole('button', { name: 'Get a VM' }).click(),
      pool(people.bob!).getByRole('button', { name: 'Get a VM' }).click(),
    ]);
    const assigned = await Promise.all(
      [people.alice!, people.bob!].map(async (who) => {
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
        await bed.vms(NAMESPACE).kubectl(['get', 'vm', vm, '-o', 'jsonpath={.status.assignment}']),
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
    // loginOnAssignment: the guest's vmop agent logged each in, and their card says so
    await expect
      .poll(() => card(people.bob!.page, assigned[1]!).locator('[data-logged-in]').textContent(), {
        timeout: 120_000,
      })
      .toBe('bob');
    expect((await bed.vms(NAMESPACE).getVm(assigned[1]!)).status).toMatchObject({ loggedInUser: 'bob' });
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
    expect((await bed.vms(NAMESPACE).getVm('alices')).spec.vm.state).toBe('Running');
    // carol has no grant on the pool
    expect(
      (await callApi(people.carol!.page, 'POST', `/api/pools/${NAMESPACE}/class/assignment`)).status,
    ).toBe(404);
  });

  it('shows an administrator (RBAC) every VM and lets them change CPUs, seen live', async () => {
    const { page } = people.admin!;
    await page.goto(`${url}/admin`);
    expect(new URL(page.url()).pathname).toBe('/admin');
    await expect
      .poll(() => shownVms(page))
      .toEqual(['alices', 'pooled-1', 'pooled-2', 'secret', 'teams'].map((vm) => `${NAMESPACE}/${vm}`));
    const row = page.locator(`tr[data-vm="${NAMESPACE}/alices"]`);
    await expect(row.locator('[data-cpus]').textContent()).resolves.toBe('1');
    // Its address: the guest agent's (QEMU's user network; the bed configures no VM subnets).
    await expect
      .poll(() => row.locator('[data-address]').textContent(), { timeout: 60_000 })
      .toBe('10.0.2.15');
    await row.getByLabel('CPUs of alices').fill('2');
    await row.getByLabel('CPUs of alices').press('Enter');
    await expect.poll(() => row.locator('[data-cpus]').textContent(), { timeout: 60_000 }).toBe('2');
    expect(await bed.vms(NAMESPACE).eventMessages('alices')).toContain(
      'RequestedInWebGui: admin set currentCpus 2',
    );
  });

  it('the admin table shows the right VMs wherever it is scrolled, rows of many buttons too', async () => {
    const vms = bed.vms(ROWS_NAMESPACE);
    // 40 VMs asked to run on a node that does not exist: every button shows, nothing runs.
    await vms.apply(
      Array.from({ length: 40 }, (_, i) =>
        testGuestManifest(`many-${String(i).padStart(2, '0')}`, ROWS_NAMESPACE, {
          extraSpec: '  nodeSelector: {vmop.test/nowhere: "true"}',
        }),
      ).join('---\n'),
    );
    const { page } = people.admin!;
    const viewport = page.viewportSize();
    // Narrow enough that the action buttons of a row would wrap onto lines of their own.
    await page.setViewportSize({ width: 800, height: 700 });
    try {
      await page.goto(`${url}/admin`);
      await page.getByLabel('Filter VMs by namespace or name').fill(`${ROWS_NAMESPACE}/many-`);
      await expect.poll(() => page.locator('.admin-rows table').getAttribute('aria-rowcount')).toBe('41');
      await page.locator(`tr[data-vm="${ROWS_NAMESPACE}/many-00"] [data-action="stop"]`).waitFor();
      const rows = page.locator('.admin-rows');
      for (const fraction of [0.25, 0.5, 0.75, 1]) {
        await rows.evaluate((box, at) => {
          box.scrollTop = at * (box.scrollHeight - box.clientHeight);
        }, fraction);
        // The row under the header is the one the scroll position says, once the table has drawn:
        // how many rows it is off (the header cells stick to the top; the thead scrolls away).
        await expect
          .poll(() =>
            rows.evaluate((box) => {
              const headerBottom = box.querySelector('thead th')!.getBoundingClientRect().bottom;
              const drawn = [...box.querySelectorAll('tbody tr[data-vm]')];
              const height = drawn[0]!.getBoundingClientRect().height;
              const under = drawn.find((row) => row.getBoundingClientRect().bottom > headerBottom + 1);
              const index = under ? Number(under.getAttribute('aria-rowindex')) - 2 : -100;
              return Math.abs(index - Math.floor(box.scrollTop / height));
            }),
          )
          .toBeLessThanOrEqual(1);
      }
      // Scrolled to the end, the last VM is in view.
      const last = await page.locator(`tr[data-vm="${ROWS_NAMESPACE}/many-39"]`).boundingBox();
      const box = await rows.boundingBox();
      expect(last!.y + last!.height).toBeLessThanOrEqual(box!.y + box!.height + 1);

      // Finding VMs: the namespace picked and the name sorted the other way put many-39 first; a
      // phase none of them has leaves no row.
      await rows.evaluate((box) => (box.scrollTop = 0));
      await page.getByLabel('Filter VMs by namespace or name').fill('');
      await page.getByLabel('Namespace', { exact: true }).selectOption(ROWS_NAMESPACE);
      await expect.poll(() => page.locator('.admin-rows table').getAttribute('aria-rowcount')).toBe('41');
      await page.locator('button[data-sort="name"]').click(); // sorted by name already: now the other way
      await expect
        .poll(() => page.locator('.admin-rows tbody tr[data-vm]').first().getAttribute('data-vm'))
        .toBe(`${ROWS_NAMESPACE}/many-39`);
      // Picking their phase keeps all 40; another phase (another namespace's VMs run) none.
      const theirs = (await page
        .locator(`tr[data-vm="${ROWS_NAMESPACE}/many-39"] [data-phase]`)
        .textContent())!;
      await page.getByLabel('Phase', { exact: true }).selectOption(theirs);
      await expect.poll(() => page.locator('.admin-rows table').getAttribute('aria-rowcount')).toBe('41');
      const phases = await page.getByLabel('Phase', { exact: true }).locator('option').allTextContents();
      const other = phases.find((phase) => phase !== 'All phases' && phase !== theirs);
      expect(other, `phases offered: ${phases.join(', ')}`).toBeDefined();
      await page.getByLabel('Phase', { exact: true }).selectOption(other!);
      await expect.poll(() => page.locator('.admin-rows table').getAttribute('aria-rowcount')).toBe('1');
    } finally {
      if (viewport) await page.setViewportSize(viewport);
      await vms.kubectl(['delete', 'vm', '--all', '--wait=false']);
    }
  });

  it("charts the cluster's CPUs and RAM in use over 24 h, held and used, for administrators, and for nobody else", async () => {
    const { page } = people.admin!;
    // The chart drew nothing once: four lines declared, two given (issue 56), a TypeError in the page.
    const pageErrors: string[] = [];
    page.on('pageerror', (err) => pageErrors.push(err.message));
    await page.reload();
    const chart = page.locator('figure.usage');
    await chart.locator('canvas').waitFor();
    // The bed samples every 5 s: the chart's newest point soon counts what the table shows.
    const inUse = async () => {
      const cpus = await page.locator('[data-summary="cpus"]').textContent();
      const vms = await page.locator('[data-summary="vms"]').textContent();
      const latest = await chart.locator('[data-usage-latest]').textContent();
      const [, charted, ram, chartedVms] =
        /^now (\d+) CPUs and ([\d.]+) GiB of RAM in use by (\d+) VMs$/.exec(latest ?? '') ?? [];
      return { cpus: charted === cpus, vms: chartedVms === vms, ram: Number(ram) > 0, latest };
    };
    await expect.poll(inUse, { timeout: 30_000 }).toMatchObject({ cpus: true, vms: true, ram: true });
    // And what the running VMs use of it, from the samples their runners keep: their QEMUs take memory.
    await expect
      .poll(
        async () =>
          /^busy [\d.]+ CPUs, taking ([\d.]+) GiB$/.exec(
            (await chart.locator('[data-usage-used]').textContent()) ?? '',
          )?.[1],
        {
          timeout: 60_000,
        },
      )
      .toMatch(/^0\.(?!00)\d\d$|^[1-9]/);
    expect(Number(await chart.getAttribute('data-usage-points'))).toBeGreaterThan(1);
    expect(pageErrors).toEqual([]);
    expect(await callApi(people.alice!.page, 'GET', '/api/usage')).toEqual({
      status: 403,
      body: JSON.stringify({ message: 'only people who may list every VM see the cluster totals' }),
    });
    await people.alice!.page.goto(`${url}/admin`);
    await people.alice!.page.locator('[data-summary="vms"]').waitFor();
    expect(await people.alice!.page.locator('figure.usage').count()).toBe(0);
    // She is told why the page lists fewer VMs than the cluster has (it said nothing: issue 56).
    const scope = await people.alice!.page.locator('[data-admin-scope]').textContent();
    expect(scope?.replace(/\s+/g, ' ').trim()).toBe(
      'Listed are the VMs you may use. Every VM of the cluster is listed for people who may list VMs in all namespaces.',
    );
    expect(await page.locator('[data-admin-scope]').count()).toBe(0);
  });

  it('lists the nodes with what the VMs on them hold, live, for administrators, and for nobody else', async () => {
    const { page } = people.admin!;
    const vms = bed.vms(NAMESPACE);
    await page.goto(`${url}/admin`);
    await page.getByRole('link', { name: 'Nodes' }).click();
    expect(new URL(page.url()).pathname).toBe('/nodes');
    const [node] = JSON.parse(await vms.kubectl(['get', 'nodes', '-o', 'json'])).items;
    const row = page.locator(`tr[data-node="${node.metadata.name}"]`);
    await expect.poll(() => row.locator('[data-node-state]').textContent()).toBe('Ready');
    expect(Number(await row.locator('[data-node-cpus]').textContent())).toBe(
      Number(node.status.allocatable.cpu),
    );
    // What the cluster says runs there, as the page says it.
    const placed = async () => {
      const all = JSON.parse(await vms.kubectl(['get', 'vms', '-A', '-o', 'json'])).items as Array<{
        status?: { phase?: string; node?: string; cpus?: number; ram?: string };
      }>;
      const running = all.filter(
        (vm) => vm.status?.node === node.metadata.name && vm.status?.phase === 'Running',
      );
      return {
        running: running.length,
        cpus: running.reduce((sum, vm) => sum + (vm.status!.cpus ?? 0), 0),
        ramBytes: running.reduce((sum, vm) => sum + (parseMemorySize(vm.status!.ram ?? '0') ?? 0), 0),
      };
    };
    const shown = async () => ({
      running: Number(await row.locator('[data-node-running]').textContent()),
      cpus: Number(await row.locator('[data-node-cpus-held]').textContent()),
      ramBytes: Number(await row.locator('[data-node-ram-held]').getAttribute('data-bytes')),
    });
    const before = await placed();
    expect(before.running).toBeGreaterThan(0);
    await expect.poll(shown, { timeout: 30_000 }).toEqual(await placed());
    // A VM's balloon gives 64 MiB back: the node's row follows without a reload.
    const ram = (await vms.getVm('alices')).status!.ram!;
    await vms.patchVm('alices', { currentRam: `${parseMemorySize(ram)! / MiB - 64}Mi` });
    await expect
      .poll(shown, { timeout: 30_000 })
      .toEqual({ ...before, ramBytes: before.ramBytes - 64 * MiB });
    await vms.patchVm('alices', { currentRam: ram });
    await vms.waitForVm('alices', (vm) => expect(vm.status?.ram).toBe(ram), 30_000);
    // alice may not list nodes: no link, and the API says no.
    const alice = people.alice!.page;
    await alice.goto(`${url}/admin`);
    await alice.locator('[data-summary="vms"]').waitFor();
    expect(await alice.getByRole('link', { name: 'Nodes' }).count()).toBe(0);
    expect(await callApi(alice, 'GET', '/api/nodes')).toEqual({
      status: 403,
      body: JSON.stringify({ message: 'only people who may list the nodes and every VM see the nodes' }),
    });
  });

  it("shows a VM's own page: its conditions, Events, and its CPU, memory, disk and network use over the last hour; nobody else's", async () => {
    const { page } = people.alice!;
    await page.goto(url);
    await card(page, 'alices').locator('[data-vm-link]').click();
    expect(new URL(page.url()).pathname).toBe(`/vm/${NAMESPACE}/alices`);
    const vmPage = page.locator(`[data-vm-page="${NAMESPACE}/alices"]`);
    await expect(vmPage.locator('[data-condition="Running"] [data-status]').textContent()).resolves.toBe(
      'True',
    );
    // One line per Event, its reason and message apart (issue 56: "Started:the VM runs").
    const requested = vmPage.locator('[data-event="RequestedInWebGui"]').first();
    await expect(requested.textContent()).resolves.toMatch(/RequestedInWebGui(?: \(×\d+\))?: \S/);
    // Said as people say it (issue 56: "1 CPUs").
    await expect(vmPage.locator('[data-size]').textContent()).resolves.toMatch(/^(?:1 CPU|[2-9] CPUs), /);
    // The runner records a sample every 15 s; a rate needs two of them.
    await expect
      .poll(async () => Number(await vmPage.getAttribute('data-usage-points')), { timeout: 60_000 })
      .toBeGreaterThan(1);
    await expect
      .poll(() => vmPage.locator('[data-chart="cpu"] [data-latest]').textContent(), { timeout: 60_000 })
      .toMatch(/^now busy \d+\.\d+$/);
    await expect(vmPage.locator('[data-chart="memory"] [data-latest]').textContent()).resolves.toMatch(
      /^now taken from the node [1-9]/,
    );
    // Each chart draws once its data is in: the four need not be there with the CPU caption.
    await expect.poll(() => vmPage.locator('figure[data-chart] canvas').count(), { timeout: 30_000 }).toBe(4);
    expect((await callApi(page, 'GET', `/api/vms/${NAMESPACE}/secret`)).status).toBe(404);

    // Live, as the table is (issue 56: a RAM change showed after 11–13.5 s, at the page's next
    // reload): with that reload put off for an hour, a change still shows, told by /api/live.
    await page.route(`**/api/vms/${NAMESPACE}/alices`, async (route) => {
      const response = await route.fetch();
      const details = (await response.json()) as { usage: Record<string, unknown> };
      await route.fulfill({
        response,
        json: { ...details, usage: { ...details.usage, sampleSeconds: 3600 } },
      });
    });
    await page.reload();
    await expect(vmPage.locator('[data-size]').textContent()).resolves.toMatch(/, 256Mi RAM$/);
    const setRam = (ram: string) =>
      bed
        .vms(NAMESPACE)
        .kubectl(['patch', 'vm', 'alices', '--type=merge', '-p', `{"spec":{"vm":{"currentRam":"${ram}"}}}`]);
    await setRam('192Mi');
    await expect
      .poll(() => vmPage.locator('[data-size]').textContent(), { timeout: 60_000 })
      .toMatch(/, 192Mi RAM$/);
    await page.unroute(`**/api/vms/${NAMESPACE}/alices`);
    await setRam('256Mi');

    // It acts, with what the person may do (issue 56: it could not): alice may stop it and open
    // its console; the admin may also change its CPUs there, and sees the change.
    const actions = vmPage.locator('[data-page-actions]');
    await expect.poll(() => actions.locator('button').allTextContents()).toContain('Stop');
    expect(await actions.getByRole('link', { name: 'Console' }).getAttribute('href')).toBe(
      `/console/${NAMESPACE}/alices`,
    );
    expect(await actions.getByLabel('CPUs of alices').count()).toBe(0);
    const admins = people.admin!.page;
    await admins.goto(`${url}/vm/${NAMESPACE}/alices`);
    const cpus = admins.locator('[data-page-actions]').getByLabel('CPUs of alices');
    await cpus.fill('1');
    await cpus.press('Enter');
    await expect
      .poll(() => admins.locator('[data-size]').textContent(), { timeout: 60_000 })
      .toMatch(/^1 CPU, /);
  });

  it("shows a VM's YAML to who sees it, and saves an edit the apiserver accepted in a dry run; a refused one changes nothing", async () => {
    const { page } = people.admin!;
    const vms = bed.vms(NAMESPACE);
    const timeout = async () =>
      Number(await vms.kubectl(['get', 'vm', 'teams', '-o', 'jsonpath={.spec.vm.powerdownTimeout}']));
    await page.goto(`${url}/vm/${NAMESPACE}/teams`);
    const yaml = page.locator('[data-yaml]');
    await yaml.locator('summary').click();
    const editor = yaml.getByLabel('YAML of teams');
    await expect.poll(() => editor.inputValue()).toContain('powerdownTimeout: 60');
    const loaded = await editor.inputValue();
    const message = yaml.locator('[data-yaml-message]');
    // The CRD's schema refuses a word for seconds: the apiserver's reason, at the editor.
    await editor.fill(loaded.replace('powerdownTimeout: 60', 'powerdownTimeout: soon'));
    await yaml.locator('[data-action="yaml-check"]').click();
    await expect.poll(() => message.textContent()).toContain('spec.vm.powerdownTimeout');
    await yaml.locator('[data-action="yaml-save"]').click();
    await expect.poll(() => message.textContent()).toContain('spec.vm.powerdownTimeout');
    expect(await timeout()).toBe(60);
    // Checked, nothing changes; saved, it does, and the VM's Events say who.
    await editor.fill(loaded.replace('powerdownTimeout: 60', 'powerdownTimeout: 45'));
    await yaml.locator('[data-action="yaml-check"]').click();
    await expect.poll(() => message.textContent()).toContain('The apiserver accepts it.');
    expect(await timeout()).toBe(60);
    await yaml.locator('[data-action="yaml-save"]').click();
    await expect.poll(() => message.textContent()).toContain('Saved.');
    expect(await timeout()).toBe(45);
    expect(await vms.eventMessages('teams')).toContain('RequestedInWebGui: admin edited its YAML');
    // An edit of a version someone else changed since is refused, theirs kept.
    const stale = await editor.inputValue();
    await vms.patchVm('teams', { powerdownTimeout: 50 });
    await editor.fill(stale.replace('powerdownTimeout: 45', 'powerdownTimeout: 40'));
    await yaml.locator('[data-action="yaml-save"]').click();
    await expect.poll(() => message.textContent()).toContain('teams changed since you loaded it');
    expect(await timeout()).toBe(50);
    await vms.patchVm('teams', { powerdownTimeout: 60 });
    for (const yaml of ['', '- a list', 'kind: [unclosed'])
      expect(
        (await callApi(page, 'PUT', `/api/vms/${NAMESPACE}/teams/yaml`, { body: { yaml } })).status,
      ).toBe(400);
    // Alice sees her VM's YAML, may not change it: no Save, and the API refuses.
    const alice = people.alice!.page;
    await alice.goto(`${url}/vm/${NAMESPACE}/alices`);
    await alice.locator('[data-yaml] summary').click();
    await expect.poll(() => alice.getByLabel('YAML of alices').inputValue()).toContain('name: alices');
    expect(await alice.getByLabel('YAML of alices').getAttribute('readonly')).not.toBeNull();
    expect(await alice.locator('[data-action="yaml-save"]').count()).toBe(0);
    expect(
      await callApi(alice, 'PUT', `/api/vms/${NAMESPACE}/alices/yaml`, {
        body: { yaml: await alice.getByLabel('YAML of alices').inputValue() },
      }),
    ).toEqual({ status: 403, body: JSON.stringify({ message: 'you may not edit alices' }) });
  });

  it("takes, restores and clones a VM's snapshots on its page, for a person RBAC lets; nobody else", async () => {
    const { page } = people.admin!;
    const vms = bed.vms(NAMESPACE);
    await page.goto(`${url}/vm/${NAMESPACE}/secret`);
    const vmPage = page.locator(`[data-vm-page="${NAMESPACE}/secret"]`);
    await expect(vmPage.locator('[data-snapshots]').textContent()).resolves.toContain('No snapshots.');
    await vmPage.locator('[data-action="snapshot"]').click();
    const row = vmPage.locator('[data-snapshot]').first();
    // Seen without a reload: the page looks again while a snapshot is under way.
    await expect.poll(() => row.locator('[data-phase]').textContent(), { timeout: 60_000 }).toBe('Ready');
    const snapshot = (await row.getAttribute('data-snapshot'))!;
    expect(snapshot).toMatch(/^secret-/);
    expect(
      await vms.kubectl([
        'get',
        'vmsnapshot',
        snapshot,
        '-o',
        'jsonpath={.spec.virtualMachineName} {.metadata.annotations.vmoperator\\.jdrupes\\.org/requested-by}',
      ]),
    ).toBe('secret admin');

    // A name no VM may have is refused at the field's check and by the API behind it.
    expect(
      (
        await callApi(page, 'POST', `/api/vms/${NAMESPACE}/secret/snapshots/${snapshot}/clone`, {
          body: { name: 'Not A Name' },
        })
      ).status,
    ).toBe(400);
    await row.getByLabel(`name of a new VM cloned from ${snapshot}`).fill('secret-copy');
    await row.locator('[data-action="clone"]').click();
    await vms.waitForVm('secret-copy', (vm) =>
      expect(vm.metadata.annotations?.['vmoperator.jdrupes.org/cloned-from']).toBe(snapshot),
    );

    page.once('dialog', (dialog) => void dialog.accept());
    await row.locator('[data-action="restore"]').click();
    await expect
      .poll(
        () =>
          vms.kubectl([
            'get',
            'vmrestore',
            '-o',
            'jsonpath={range .items[*]}{.spec.virtualMachineSnapshotName} {.spec.stopVirtualMachine} {.status.phase}{"\\n"}{end}',
          ]),
        { timeout: 60_000 },
      )
      .toContain(`${snapshot} true Completed`);
    const said = await vms.eventMessages('secret');
    expect(said).toContain(
      `RequestedInWebGui: admin asked to take a snapshot (VirtualMachineSnapshot ${snapshot})`,
    );
    expect(
      said.some((line) =>
        line.startsWith(`RequestedInWebGui: admin asked to clone snapshot ${snapshot} as secret-copy`),
      ),
    ).toBe(true);

    // Alice's grants give her no snapshots (RBAC alone does): no button, and the API refuses.
    const alice = people.alice!.page;
    await alice.goto(`${url}/vm/${NAMESPACE}/alices`);
    await alice.locator(`[data-vm-page="${NAMESPACE}/alices"] [data-snapshots]`).waitFor();
    expect(await alice.locator('[data-action="snapshot"]').count()).toBe(0);
    const refused = await callApi(alice, 'POST', `/api/vms/${NAMESPACE}/alices/snapshots`);
    expect(refused).toEqual({
      status: 403,
      body: JSON.stringify({ message: 'you may not snapshot alices' }),
    });
    expect((await callApi(alice, 'POST', `/api/vms/${NAMESPACE}/secret/snapshots`)).status).toBe(404);
    // Nor may she delete hers: no Delete on her page, and the API refuses and keeps it.
    expect(await alice.locator('[data-action="delete"]').count()).toBe(0);
    expect(await callApi(alice, 'DELETE', `/api/vms/${NAMESPACE}/alices`)).toEqual({
      status: 403,
      body: JSON.stringify({ message: 'you may not delete alices' }),
    });
    expect(await vms.kubectl(['get', 'vm', 'alices', '-o', 'jsonpath={.metadata.deletionTimestamp}'])).toBe(
      '',
    );

    // The admin deletes the clone on its page, once asked to confirm; the page goes to her VMs.
    await page.goto(`${url}/vm/${NAMESPACE}/secret-copy`);
    const asked: string[] = [];
    page.once('dialog', (dialog) => {
      asked.push(dialog.message());
      void dialog.accept();
    });
    await page.locator(`[data-vm-page="${NAMESPACE}/secret-copy"] [data-action="delete"]`).click();
    await page.waitForURL(`${url}/`);
    expect(asked).toEqual([
      `Delete VM secret-copy in ${NAMESPACE}? Its pod goes now; its disks' claims are kept.`,
    ]);
    await expect
      .poll(() => vms.kubectl(['get', 'vm', '--ignore-not-found', '-o', 'name']), { timeout: 60_000 })
      .not.toContain('secret-copy');
    expect(await vms.eventMessages('secret-copy')).toContain('RequestedInWebGui: admin asked to delete it');
  });

  it('uploads a disk image from the browser into a new image, for who may make images in a namespace; nobody else', async () => {
    const vms = bed.vms(CREATE_NAMESPACE);
    await vms.kubectl(['create', 'rolebinding', 'bob-edit', '--clusterrole=edit', '--user=oidc:bob']);
    const { page } = people.bob!;
    const form = page.locator('[data-upload]');
    // RBAC's answers are kept 10 s: the form shows once a page load asks after that.
    await expect
      .poll(
        async () => {
          await page.goto(`${bed.state().web.urls[0]!}/images`);
          await page.locator('main h2').waitFor();
          return form.count();
        },
        { timeout: 60_000, interval: 2_000 },
      )
      .toBe(1);
    expect(await form.locator('#upload-namespace option').allTextContents()).toEqual([CREATE_NAMESPACE]);
    const disk = bed.state().imageServer.testGuestDisk;
    const sha256 = createHash('sha256')
      .update(await readFile(disk))
      .digest('hex');
    await form.locator('#upload-file').setInputFiles(disk);
    await form.locator('#upload-name').fill(UPLOADED_IMAGE);
    const before = await page.evaluate(() => performance.timeOrigin);
    await form.locator('[data-action="upload"]').click();
    await expect
      .poll(() => form.locator('[data-upload-progress]').textContent(), { timeout: 180_000 })
      .toBe(`sent (sha256 ${sha256.slice(0, 12)}…); importing`);
    const row = page.locator(`[data-image="${CREATE_NAMESPACE}/${UPLOADED_IMAGE}"]`);
    await expect
      .poll(() => row.locator('[data-image-phase]').textContent(), { timeout: 120_000 })
      .toBe('Ready');
    expect(await page.evaluate(() => performance.timeOrigin)).toBe(before); // never reloaded
    expect(await row.locator('[data-image-source]').textContent()).toBe(`upload sha256 ${sha256}`);
    const events = JSON.parse(
      await vms.kubectl([
        'get',
        'events',
        '--field-selector',
        `involvedObject.name=${UPLOADED_IMAGE}`,
        '-o',
        'json',
      ]),
    ) as { items: Array<{ reason: string; message: string }> };
    expect(events.items.map((event) => `${event.reason}: ${event.message}`)).toContain(
      `Imported: imported qcow2 image (sha256 ${sha256})`,
    );
    // carol may make no images: no form, and the API refuses her.
    const carol = people.carol!.page;
    await carol.goto(`${url}/images`);
    await carol.locator('main h2').waitFor();
    expect(await carol.locator('[data-upload]').count()).toBe(0);
    const upload = { namespace: CREATE_NAMESPACE, name: 'carols', diskBytes: 1 << 20, sha256 };
    expect(await callApi(carol, 'POST', '/api/images', { body: upload })).toMatchObject({ status: 403 });
    expect(
      await callApi(carol, 'GET', `/api/images/${CREATE_NAMESPACE}/${UPLOADED_IMAGE}/upload`),
    ).toMatchObject({ status: 403 });
  }, 600_000);

  it('makes a VM from the New VM form for who may create VMs in a namespace, tells refusals at their fields, and offers nobody else the form', async () => {
    const vms = bed.vms(CREATE_NAMESPACE);
    const { page } = people.bob!;
    const newVmLink = page.locator('[data-action="new-vm"]');
    // RBAC's answers are kept 10 s: the link shows once a page load asks after that.
    await expect
      .poll(
        async () => {
          await page.goto(bed.state().web.urls[1]!);
          return newVmLink.count();
        },
        { timeout: 60_000, interval: 2_000 },
      )
      .toBe(1);
    const carol = people.carol!.page;
    await carol.goto(url);
    await carol.getByText('You have no VMs.').waitFor();
    expect(await carol.locator('[data-action="new-vm"]').count()).toBe(0);

    await newVmLink.click();
    const form = page.locator('[data-new-vm]');
    // The form once it loaded what it offers: the one namespace bob may create VMs in.
    await expect.poll(() => form.locator('#namespace option').allTextContents()).toEqual([CREATE_NAMESPACE]);
    const errorAt = (field: string) => form.locator(`[data-error-for="${field}"]`);
    // The form's own checks: the name's characters, its length (a runner pod's labels are made from it).
    await form.locator('#name').fill('Not_A_Name');
    await form.locator('[data-action="create"]').click();
    await expect.poll(() => errorAt('name').textContent()).toContain('lower-case letters, digits and dashes');
    expect(await form.locator('#name').getAttribute('aria-invalid')).toBe('true');
    await form.locator('#name').fill('a'.repeat(53));
    await form.locator('[data-action="create"]').click();
    await expect.poll(() => errorAt('name').textContent()).toContain('at most 52 characters');
    expect(new URL(page.url()).pathname).toBe('/new');

    // What carol may not do through the form, she may not do through its API either.
    const valid = {
      namespace: CREATE_NAMESPACE,
      name: 'from-form',
      cpus: 1,
      ram: '256Mi',
      firmware: 'bios',
      diskSize: '64Mi',
      source: { kind: 'url', url: `${bed.state().imageServer.url}/test-guest.qcow2` },
      start: true,
    };
    expect(await callApi(carol, 'POST', '/api/vms', { body: valid })).toMatchObject({ status: 403 });
    expect(await vms.kubectl(['get', 'vms', '-o', 'name'])).toBe('');

    // The bed's one node has CPU for three test guests: the pool's two, done with, make room.
    await bed.vms(NAMESPACE).kubectl(['delete', 'vm', 'pooled-1', 'pooled-2', '--wait']);
    // The test guest's disk, uploaded in the test before, booted by SeaBIOS from the disk's SYSLINUX.
    await form.locator('#name').fill(valid.name);
    await form.locator('#cpus').fill('1');
    await form.locator('#ram').fill(valid.ram);
    await form.locator('#firmware').selectOption('bios');
    await form.locator('#diskSize').fill(valid.diskSize);
    await form.locator('#source').selectOption('image');
    await form.locator('#image').selectOption(UPLOADED_IMAGE);
    await form.locator('[data-action="create"]').click();
    await page.waitForURL(`**/vm/${CREATE_NAMESPACE}/from-form`);
    const before = await page.evaluate(() => performance.timeOrigin);
    const vmPage = page.locator(`[data-vm-page="${CREATE_NAMESPACE}/from-form"]`);
    await expect
      .poll(() => vmPage.locator('[data-phase]').first().textContent(), { timeout: 300_000 })
      .toBe('Running');
    expect(await page.evaluate(() => performance.timeOrigin)).toBe(before); // seen live, never reloaded
    const made = await vms.waitForVm('from-form', (vm) =>
      expect(vms.condition(vm, 'Booted')?.status).toBe('True'),
    );
    expect(made.metadata.annotations).toMatchObject({ 'vmoperator.jdrupes.org/requested-by': 'bob' });
    expect(await vms.eventMessages('from-form')).toContain(
      'RequestedInWebGui: bob created it in the web GUI',
    );

    // The apiserver's refusal, told at its field too: the name is taken now.
    await page.goto(`${bed.state().web.urls[1]!}/new`);
    await form.locator('#name').fill(valid.name);
    await form.locator('#url').fill(valid.source.url);
    await form.locator('[data-action="create"]').click();
    await expect.poll(() => errorAt('name').textContent()).toBe('a VM of this name exists in this namespace');

    await page.goto(`${bed.state().web.urls[1]!}/vm/${CREATE_NAMESPACE}/from-form`);
    page.once('dialog', (dialog) => void dialog.accept());
    await vmPage.locator('[data-action="delete"]').click();
    await page.waitForURL(`${bed.state().web.urls[1]!}/`);
    await eventually(async () => expect(await vms.kubectl(['get', 'vms', '-o', 'name'])).toBe(''), 120_000);
  }, 600_000);

  it("lists the images of the namespaces a person may list, their import's progress live; nobody else's", async () => {
    const vms = bed.vms(CREATE_NAMESPACE);
    const source = `${bed.state().imageServer.url}/test-guest.qcow2`;
    await vms.apply(`apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachineImage
metadata: {name: guest-image, namespace: ${CREATE_NAMESPACE}}
spec:
  source: {http: {url: "${source}?made-by=web-e2e"}}
  storage: {size: 64Mi}
`);
    // bob has edit in CREATE_NAMESPACE (the test before): its images are his to list.
    const { page } = people.bob!;
    await page.goto(bed.state().web.urls[0]!);
    await page.locator('nav a[href="/images"]').click();
    const row = page.locator(`[data-image="${CREATE_NAMESPACE}/guest-image"]`);
    const before = await page.evaluate(() => performance.timeOrigin);
    await expect
      .poll(() => row.locator('[data-image-phase]').textContent(), { timeout: 120_000 })
      .toBe('Ready');
    expect(await page.evaluate(() => performance.timeOrigin)).toBe(before); // followed, never reloaded
    // The source without its query (a token could be in one); the size the claim holds.
    expect(await row.locator('[data-image-source]').textContent()).toBe(`http ${source}`);
    expect(await row.locator('[data-image-size]').textContent()).toMatch(/^\d+(Mi|Gi)$/);
    // carol may list no images: no link, and the API lists none.
    const carol = people.carol!.page;
    await carol.goto(url);
    await carol.getByText('You have no VMs.').waitFor();
    expect(await carol.locator('nav a[href="/images"]').count()).toBe(0);
    expect(JSON.parse((await callApi(carol, 'GET', '/api/images')).body)).toEqual({
      namespaces: [],
      uploadNamespaces: [],
      images: [],
    });
  });

  it('reads on a phone without sideways scrolling, and works with the keyboard alone', async () => {
    const phone = {
      viewport: { width: 390, height: 844 },
      isMobile: true,
      hasTouch: true,
      deviceScaleFactor: 3,
    };
    const { page, context } = await logIn(browser, url, 'alice', phone);
    const fitsTheWidth = () =>
      page.evaluate(() => {
        const { documentElement: root } = (globalThis as unknown as PageGlobals).document;
        return root.scrollWidth <= root.clientWidth;
      });
    await card(page, 'teams').waitFor();
    expect(await fitsTheWidth()).toBe(true);
    for (const box of await page
      .locator('[data-vm], [data-pool]')
      .evaluateAll((cards) => cards.map((c) => c.getBoundingClientRect().right)))
      expect(box).toBeLessThanOrEqual(390);
    for (const path of ['/admin', `/vm/${NAMESPACE}/alices`, `/console/${NAMESPACE}/alices?view=serial`]) {
      await page.goto(`${url}${path}`);
      await page.locator('[data-user]').waitFor();
      await page.waitForTimeout(500); // the table or terminal is laid out
      expect(await fitsTheWidth()).toBe(true);
    }
    // Tab to the Start button of the team's VM, then Enter: nothing but keys.
    await page.goto(url);
    const start = card(page, 'teams').locator('[data-action="start"]');
    await start.waitFor();
    let focused = false;
    for (let presses = 0; presses < 40 && !focused; presses++) {
      await page.keyboard.press('Tab');
      focused = await start.evaluate(
        (button) => button === (globalThis as unknown as PageGlobals).document.activeElement,
      );
    }
    expect(focused).toBe(true);
    await page.keyboard.press('Enter');
    await bed.vms(NAMESPACE).waitForVm('teams', (vm) => expect(vm.spec.vm.state).toBe('Running'), 30_000);
    await bed
      .vms(NAMESPACE)
      .kubectl(['patch', 'vm', 'teams', '--type=merge', '-p', '{"spec":{"vm":{"state":"Stopped"}}}']);
    await context.close();
  });

  it('logs out: the same cookie opens nothing afterwards, at any replica, and its open console ends', async () => {
    const { page, context } = people.alice!;
    const [session] = (await context.cookies()).filter((c) => c.name === 'vmop_session');
    const serial = await serialSocket(people.alice!);
    await page.getByRole('button', { name: 'Log out' }).click();
    await page.waitForURL(/\/dex\//);
    await expect
      .poll(serial.ended, { timeout: 30_000 })
      .toEqual({ code: 4002, reason: 'your login ended (logged out or expired)' });
    for (const replica of bed.state().web.urls) {
      const response = await fetch(`${replica}/api/me`, {
        headers: { cookie: `vmop_session=${session!.value}` },
      });
      expect(response.status).toBe(401);
    }
  });

  it('puts no password, token or session in any log, page source or URL', async () => {
    // The managers' OIDC client secret, as they were given it.
    const environ = await readFile(`/proc/${bed.state().managers[0]!.pid}/environ`, 'utf8');
    const clientSecret = /(?:^|\0)VMOP_OIDC_CLIENT_SECRET=([^\0]+)/.exec(environ)?.[1];
    expect(clientSecret).toBeTruthy();
    const secrets = [clientSecret!, ...consoleTickets, ...displayPasswords];
    for (const who of Object.values(people)) {
      secrets.push(who.csrf, who.session);
    }
    expect(consoleTickets.length).toBeGreaterThan(0);
    expect(displayPasswords.length).toBeGreaterThan(0);
    for (const log of bed.state().managers.map((m) => m.log)) {
      const text = await readFile(log, 'utf8');
      expect(text).toContain('logged in to the web GUI');
      for (const secret of secrets) expect(text).not.toContain(secret);
    }
    // Every URL the browsers asked for (the OIDC code and state are the login protocol's own, and
    // useless without the PKCE verifier and the login cookie), and the pages' HTML.
    const urls = Object.values(people).flatMap((who) => who.urls);
    expect(urls.some((u) => u.includes('/api/console/'))).toBe(true);
    for (const secret of secrets) expect(urls.filter((u) => u.includes(secret))).toEqual([]);
    for (const who of Object.values(people).filter((w) => !w.page.isClosed())) {
      const source = await who.page.content();
      for (const secret of secrets) expect(source).not.toContain(secret);
    }
  });

  it('limits the logins of one person: past ten a minute at a replica, no more sessions for her', async () => {
    const replica = bed.state().web.urls[1]!;
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      const outcomes: string[] = [];
      for (let i = 0; i < 11; i++) {
        await context.clearCookies();
        await page.goto(`${replica}/auth/login`);
        await page.locator('input[name=login]').fill('carol@example.com');
        await page.locator('input[name=password]').fill(DEV_PASSWORD);
        await page.locator('button[type=submit]').click();
        await page.waitForURL((at) => at.pathname === '/' || at.pathname === '/auth/callback');
        const session = (await context.cookies()).some((cookie) => cookie.name === 'vmop_session');
        outcomes.push(session ? 'session' : await page.locator('body').innerText());
      }
      expect(outcomes).toEqual([
        ...Array(10).fill('session'),
        'too many logins as you in a minute; try again later',
      ]);
    } finally {
      await context.close();
    }
  });

  it('limits /auth/login per client: a flood costs its sender, not the others behind the same proxy; it writes nothing to Redis', async () => {
    // The bed trusts a proxy at 127.0.0.1 (--web-trusted-proxy): its X-Forwarded-For names clients.
    const replica = new URL(bed.state().web.urls[1]!);
    const redis = new Redis(bed.state().redisUrl);
    const webKeys = async () => (await redis.keys('vmop:web:*')).sort();
    /** /auth/login's status from `from` (a local address), forwarded for `client` when given. */
    const login = (from: string, client?: string) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const request = httpRequest(
          {
            host: replica.hostname,
            port: replica.port,
            path: '/auth/login',
            localAddress: from,
            headers: client ? { 'x-forwarded-for': client } : {},
          },
          (response) => {
            let body = '';
            response.on('data', (chunk: Buffer) => (body += chunk.toString()));
            response.on('end', () => resolve({ status: response.statusCode!, body }));
          },
        );
        request.on('error', reject);
        request.end();
      });
    try {
      const before = await webKeys();
      const statuses: number[] = [];
      for (let i = 0; i < 160; i++) {
        const response = await login('127.0.0.1', '198.51.100.7');
        statuses.push(response.status);
        if (response.status === 429)
          expect(JSON.parse(response.body)).toEqual({
            message: 'too many login requests from your address; try again in a minute',
          });
      }
      expect(statuses.slice(0, 10)).toEqual(Array(10).fill(303)); // to the provider
      expect(statuses.slice(-10)).toEqual(Array(10).fill(429));
      // During the flood, another person behind the same proxy, and the proxy's own requests, log in.
      expect((await login('127.0.0.1', '198.51.100.8')).status).toBe(303);
      expect((await login('127.0.0.1')).status).toBe(303);
      // A peer that is no trusted proxy cannot pick the address it is counted as.
      const untrusted: number[] = [];
      for (let i = 0; i < 140; i++) untrusted.push((await login('127.0.0.2', `203.0.113.${i}`)).status);
      expect(untrusted.slice(-10)).toEqual(Array(10).fill(429));
      expect((await login('127.0.0.1', '198.51.100.9')).status).toBe(303);
      expect((await webKeys()).filter((key) => !before.includes(key))).toEqual([]);
    } finally {
      redis.disconnect();
    }
  });
});
