// Headless Chromium (Debian's, installed by provisioning) driven by playwright-core, and a login
// at the test bed's Dex as a person would do it: the GUI sends the browser there, they type.
import {
  chromium,
  type Browser,
  type BrowserContext,
  type BrowserContextOptions,
  type Page,
} from 'playwright-core';
import { DEV_PASSWORD } from '../../src/devenv/oidc-provider.js';

export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export const launchChromium = (): Promise<Browser> =>
  chromium.launch({ executablePath: '/usr/bin/chromium', args: CHROMIUM_ARGS });

export interface LoggedIn {
  context: BrowserContext;
  page: Page;
  /** The login's CSRF token, as the page got it, and its session cookie. */
  csrf: string;
  session: string;
  /** Every URL this browser asked for, WebSocket ones too: no secret may be in one. */
  urls: string[];
}

/** A browser of its own (cookies apart) in which `user` opened `url` and logged in at Dex. */
export async function logIn(
  browser: Browser,
  url: string,
  user: string,
  device: BrowserContextOptions = {},
): Promise<LoggedIn> {
  const context = await browser.newContext(device);
  const urls: string[] = [];
  context.on('request', (request) => urls.push(request.url()));
  context.on('page', (opened) => opened.on('websocket', (socket) => urls.push(socket.url())));
  const page = await context.newPage();
  await page.goto(url);
  // Dex's password form (its connector choice is skipped: only the password database is on).
  await page.locator('input[name=login]').fill(`${user}@example.com`); // Dex asks for the email address
  await page.locator('input[name=password]').fill(DEV_PASSWORD);
  await page.locator('button[type=submit]').click();
  await page.locator('[data-user]').waitFor();
  const csrf = await page.evaluate(
    async () => ((await (await fetch('/api/me')).json()) as { csrf: string }).csrf,
  );
  const session = (await context.cookies()).find((cookie) => cookie.name === 'vmop_session')?.value ?? '';
  return { context, page, csrf, session, urls };
}
