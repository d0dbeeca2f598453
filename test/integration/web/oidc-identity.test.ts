// Who a GUI login names, against a real Dex whose accounts can carry what people may pick at many
// providers: a `preferred_username` of someone else's name, an email address nobody verified.
// vmop names people as kube-apiserver's --oidc-username-claim would: `sub` by default, `email`
// only when verified, so neither makes mallory alice or the admin.
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEV_PASSWORD, startOidcProvider, type OidcProvider } from '../../../src/devenv/oidc-provider.js';
import { LoginError, oidcLogin } from '../../../src/web/oidc.js';
import { WebOptions } from '../../../src/web/options.js';

const PUBLIC_URL = 'http://127.0.0.1:9/';

describe('GUI logins at a real OpenID Connect provider (Dex)', () => {
  let dir: string;
  let dex: OidcProvider;

  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'vmop-oidc-'));
    dex = await startOidcProvider({
      dir,
      redirectUris: [new URL('/auth/callback', PUBLIC_URL).href],
      people: [
        { user: 'alice', name: 'Alice', groups: ['users'] },
        // Mallory picked alice's name as hers, and typed the admin's address, which nobody checked.
        {
          user: 'mallory',
          name: 'Mallory',
          groups: [],
          preferredUsername: 'alice',
          email: 'admin@corp.example',
          emailVerified: false,
        },
      ],
    });
  }, 60_000);

  afterAll(async () => {
    await dex?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  /** A whole login in Dex's password form, as a browser makes it; the person vmop names, or why none. */
  const loginAs = async (email: string, usernameClaim?: string) => {
    const login = await oidcLogin(
      WebOptions.parse({
        port: 0,
        publicUrl: PUBLIC_URL,
        oidc: {
          issuer: dex.issuer,
          clientId: dex.clientId,
          clientSecret: dex.clientSecret,
          ...(usernameClaim && { usernameClaim }),
        },
      }),
    );
    const { url, cookie } = await login.begin('/');
    const callback = await throughDex(url, email);
    return login.finish(callback, cookie).then(
      ({ person }) => person.user,
      (err: Error) => (err instanceof LoginError ? `refused: ${err.message}` : Promise.reject(err)),
    );
  };

  it('names people by `sub` by default: a picked preferred_username or an unverified email names nobody else', async () => {
    const alice = await loginAs('alice@example.com');
    const mallory = await loginAs('admin@corp.example');
    expect(alice).not.toBe(mallory);
    for (const other of ['alice', 'admin@corp.example']) expect(mallory).not.toBe(other);
  });

  it('names people by email only where the provider verified it', async () => {
    expect(await loginAs('alice@example.com', 'email')).toBe('alice@example.com');
    expect(await loginAs('admin@corp.example', 'email')).toBe(
      'refused: the provider has not verified your email address, which names you here',
    );
  });

  it('a claim people pick names whoever picked it: why `preferred_username` is for providers where they cannot', async () => {
    expect(await loginAs('admin@corp.example', 'preferred_username')).toBe('alice');
  });
});

/** Follows Dex from the authorization URL through its password form to vmop's callback URL. */
async function throughDex(start: URL, email: string): Promise<URL> {
  let url = start;
  let body: URLSearchParams | undefined;
  for (let hop = 0; hop < 10; hop++) {
    if (url.pathname === '/auth/callback') return url;
    const response = await fetch(url, { redirect: 'manual', ...(body && { method: 'POST', body }) });
    body = undefined;
    const location = response.headers.get('location');
    if (location) {
      url = new URL(location, url);
      continue;
    }
    const page = await response.text();
    if (!/name="password"/.test(page))
      throw new Error(`Dex answered ${response.status} without a login form`);
    // The form posts back to where it came from.
    body = new URLSearchParams({ login: email, password: DEV_PASSWORD });
  }
  throw new Error('Dex never sent the browser back');
}
