// Who a login names, how a login in progress is kept, and which public URLs the GUI refuses.
import { describe, expect, it } from 'vitest';
import { LoginError, personOf } from '../../../src/web/oidc.js';
import { WebOptions } from '../../../src/web/options.js';
import { LOGIN_SECONDS, loginSealer } from '../../../src/web/sealed-login.js';

const claims = {
  sub: 'CgVhbGljZQ',
  preferred_username: 'alice',
  email: 'alice@example.com',
  groups: ['users'],
};

describe('the person a login names', () => {
  it('is the configured claim alone (by default the provider-assigned sub), with its groups', () => {
    const defaults = WebOptions.parse(web()).oidc;
    expect(personOf(claims, defaults)).toEqual({ user: 'CgVhbGljZQ', groups: ['users'] });
    expect(personOf(claims, { ...defaults, usernameClaim: 'preferred_username' }).user).toBe('alice');
  });

  it('is nobody when the claim is missing: no fall-back to an email or another claim', () => {
    const oidc = { usernameClaim: 'preferred_username', groupsClaim: 'groups' };
    const { preferred_username: _, ...without } = claims;
    expect(() => personOf(without, oidc)).toThrow(
      new LoginError('the provider named no user (claim preferred_username)'),
    );
  });

  it('counts an email only when the provider verified it', () => {
    const oidc = { usernameClaim: 'email', groupsClaim: 'groups' };
    expect(() => personOf(claims, oidc)).toThrow(/not verified your email address/);
    expect(() => personOf({ ...claims, email_verified: 'true' }, oidc)).toThrow(/not verified/);
    expect(personOf({ ...claims, email_verified: true }, oidc).user).toBe('alice@example.com');
  });
});

describe('a login in progress, sealed in the browser’s cookie', () => {
  const pending = { state: 's', verifier: 'v', nonce: 'n', returnTo: '/console/ns/vm' };

  it('opens with the key it was sealed with, until it expires', () => {
    const sealer = loginSealer('client-secret');
    const now = Date.now();
    const cookie = sealer.seal(pending, now);
    expect(cookie).not.toContain('/console');
    expect(sealer.open(cookie, now + 1000)).toMatchObject(pending);
    expect(sealer.open(cookie, now + LOGIN_SECONDS * 1000 + 1)).toBeUndefined();
    expect(loginSealer('another secret').open(cookie, now)).toBeUndefined();
  });

  it('does not open once altered', () => {
    const sealer = loginSealer('client-secret');
    const bytes = Buffer.from(sealer.seal(pending), 'base64url');
    bytes[bytes.length - 1]! ^= 1;
    expect(sealer.open(bytes.toString('base64url'))).toBeUndefined();
    expect(sealer.open('')).toBeUndefined();
    expect(sealer.open('not a cookie')).toBeUndefined();
  });
});

describe('the public URL', () => {
  it('is refused as plain http (not loopback) unless allowed, naming the field', () => {
    const refused = WebOptions.safeParse(web('http://vms.example.com'));
    expect(refused.error?.issues).toEqual([
      expect.objectContaining({
        path: ['publicUrl'],
        message: expect.stringMatching(/^is plain http: .*allowPlainHttp/),
      }),
    ]);
    expect(WebOptions.safeParse({ ...web('http://vms.example.com'), allowPlainHttp: true }).success).toBe(
      true,
    );
    expect(WebOptions.safeParse(web('http://127.0.0.1:8081')).success).toBe(true);
    expect(WebOptions.safeParse(web('https://vms.example.com')).success).toBe(true);
  });
});

describe('the trusted proxies', () => {
  it('take addresses and subnets, and refuse anything else naming the entry', () => {
    const proxies = ['10.244.0.0/16', '192.0.2.7', 'fd00::/8'];
    expect(WebOptions.parse({ ...web(), trustedProxies: proxies }).trustedProxies).toEqual(proxies);
    expect(WebOptions.parse(web()).trustedProxies).toEqual([]);
    const refused = WebOptions.safeParse({ ...web(), trustedProxies: ['10.244.0.0/16', 'ingress.example'] });
    expect(refused.error?.issues.map((issue) => issue.path)).toEqual([['trustedProxies', 1]]);
  });
});

function web(publicUrl = 'https://vms.example.com') {
  return {
    port: 0,
    publicUrl,
    oidc: { issuer: 'https://login.example.com', clientId: 'vmop', clientSecret: 's' },
  };
}
