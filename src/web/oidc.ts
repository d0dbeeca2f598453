// Logging in with OpenID Connect: the authorization code flow with PKCE (S256), state and nonce,
// by openid-client against any standard provider. The person is named by the configured claim
// alone, as kube-apiserver's --oidc-username-claim names them: no fall-back to another claim, and
// `email` only when the provider says it is verified (anyone can type an address at most providers).
import * as client from 'openid-client';
import { LOOPBACK, type WebSettings } from './options.js';
import { loginSealer } from './sealed-login.js';
import { Person } from './sessions.js';

export interface OidcLogin {
  /** Where to send the browser to log in, and the login cookie that binds the way back to it. */
  begin(returnTo: string): Promise<{ url: URL; cookie: string }>;
  /** The person, from the provider's answer at `callbackUrl` and the browser's login cookie. */
  finish(callbackUrl: URL, cookie: string): Promise<{ person: Person; returnTo: string }>;
}

export class LoginError extends Error {}

/** The person the ID token's claims name, or why they name nobody. */
export function personOf(
  claims: Record<string, unknown>,
  oidc: Pick<WebSettings['oidc'], 'usernameClaim' | 'groupsClaim'>,
): Person {
  const user = claims[oidc.usernameClaim];
  if (typeof user !== 'string' || user === '')
    throw new LoginError(`the provider named no user (claim ${oidc.usernameClaim})`);
  if (oidc.usernameClaim === 'email' && claims.email_verified !== true)
    throw new LoginError('the provider has not verified your email address, which names you here');
  const groups = claims[oidc.groupsClaim];
  return Person.parse({
    user,
    groups: Array.isArray(groups) ? groups.filter((g) => typeof g === 'string') : [],
    ...(typeof claims.name === 'string' && { name: claims.name }),
  });
}

export async function oidcLogin(settings: WebSettings): Promise<OidcLogin> {
  const { oidc } = settings;
  const issuer = new URL(oidc.issuer);
  // Plain HTTP only for a provider on this host (the test bed's).
  const insecure = issuer.protocol === 'http:' && LOOPBACK.has(issuer.hostname);
  const config = await client.discovery(
    issuer,
    oidc.clientId,
    oidc.clientSecret,
    undefined,
    insecure ? { execute: [client.allowInsecureRequests] } : undefined,
  );
  const redirectUri = new URL('/auth/callback', settings.publicUrl).href;
  const sealer = loginSealer(oidc.clientSecret);

  return {
    async begin(returnTo) {
      const state = client.randomState();
      const verifier = client.randomPKCECodeVerifier();
      const nonce = client.randomNonce();
      const url = client.buildAuthorizationUrl(config, {
        redirect_uri: redirectUri,
        scope: oidc.scopes,
        code_challenge: await client.calculatePKCECodeChallenge(verifier),
        code_challenge_method: 'S256',
        state,
        nonce,
      });
      return { url, cookie: sealer.seal({ state, verifier, nonce, returnTo }) };
    },
    async finish(callbackUrl, cookie) {
      const pending = sealer.open(cookie);
      if (!pending || pending.state !== callbackUrl.searchParams.get('state'))
        throw new LoginError('this login has expired or did not start in this browser; log in again');
      const tokens = await client.authorizationCodeGrant(config, callbackUrl, {
        pkceCodeVerifier: pending.verifier,
        expectedState: pending.state,
        expectedNonce: pending.nonce,
        idTokenExpected: true,
      });
      return { person: personOf(tokens.claims() ?? {}, oidc), returnTo: pending.returnTo };
    },
  };
}
