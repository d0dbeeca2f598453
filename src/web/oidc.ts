// Logging in with OpenID Connect: the authorization code flow with PKCE (S256), state and nonce,
// by openid-client against any standard provider. The person is named by the configured claims.
import * as client from 'openid-client';
import type { WebSettings } from './options.js';
import { Person, randomToken, type SessionStore } from './sessions.js';

/** Host names of this machine (plain HTTP is all right there: the test bed's). */
export const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]']);

export interface OidcLogin {
  /** Where to send the browser to log in; `state` binds the way back to this browser (a cookie). */
  begin(returnTo: string): Promise<{ url: URL; state: string }>;
  /** The person, from the provider's answer at `callbackUrl`; undefined for a stale or forged one. */
  finish(callbackUrl: URL, state: string): Promise<{ person: Person; returnTo: string }>;
}

export class LoginError extends Error {}

export async function oidcLogin(settings: WebSettings, sessions: SessionStore): Promise<OidcLogin> {
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

  return {
    async begin(returnTo) {
      const state = randomToken();
      const verifier = client.randomPKCECodeVerifier();
      const nonce = client.randomNonce();
      await sessions.beginLogin(state, { verifier, nonce, returnTo });
      const url = client.buildAuthorizationUrl(config, {
        redirect_uri: redirectUri,
        scope: oidc.scopes,
        code_challenge: await client.calculatePKCECodeChallenge(verifier),
        code_challenge_method: 'S256',
        state,
        nonce,
      });
      return { url, state };
    },
    async finish(callbackUrl, state) {
      const pending = await sessions.finishLogin(state);
      if (!pending) throw new LoginError('this login has expired or was used already; log in again');
      const tokens = await client.authorizationCodeGrant(config, callbackUrl, {
        pkceCodeVerifier: pending.verifier,
        expectedState: state,
        expectedNonce: pending.nonce,
        idTokenExpected: true,
      });
      const claims: Record<string, unknown> = tokens.claims() ?? {};
      const user = claims[oidc.usernameClaim] ?? claims.email ?? claims.sub;
      const groups = claims[oidc.groupsClaim];
      const person = Person.safeParse({
        user,
        groups: Array.isArray(groups) ? groups.filter((g) => typeof g === 'string') : [],
        ...(typeof claims.name === 'string' && { name: claims.name }),
      });
      if (!person.success) throw new LoginError(`the provider named no user (claim ${oidc.usernameClaim})`);
      return { person: person.data, returnTo: pending.returnTo };
    },
  };
}
