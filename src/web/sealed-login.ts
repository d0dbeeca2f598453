// A login in progress (its PKCE verifier, nonce and where to go back), kept in the browser's own
// login cookie, sealed with AES-256-GCM under a key derived from the OIDC client secret (every
// replica has it): `GET /auth/login` writes nothing on the server, so unauthenticated requests
// cannot fill Redis, and any replica can finish the login.
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';
import { z } from 'zod';

const PendingLogin = z.object({
  state: z.string(),
  verifier: z.string(),
  nonce: z.string(),
  returnTo: z.string(),
  /** Until when it may be finished (ms since the epoch). */
  until: z.number(),
});
export type PendingLogin = z.infer<typeof PendingLogin>;

export const LOGIN_SECONDS = 600;

export function loginSealer(clientSecret: string) {
  const key = Buffer.from(hkdfSync('sha256', clientSecret, 'vmop', 'vmop web login cookie', 32));
  return {
    seal(pending: Omit<PendingLogin, 'until'>, now = Date.now()): string {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      const body = JSON.stringify({ ...pending, until: now + LOGIN_SECONDS * 1000 });
      const sealed = Buffer.concat([cipher.update(body, 'utf8'), cipher.final()]);
      return Buffer.concat([iv, cipher.getAuthTag(), sealed]).toString('base64url');
    },
    /** The pending login, if the cookie is one this server sealed and it has not expired. */
    open(cookie: string, now = Date.now()): PendingLogin | undefined {
      const bytes = Buffer.from(cookie, 'base64url');
      if (bytes.length < 29) return undefined;
      try {
        const decipher = createDecipheriv('aes-256-gcm', key, bytes.subarray(0, 12));
        decipher.setAuthTag(bytes.subarray(12, 28));
        const body = Buffer.concat([decipher.update(bytes.subarray(28)), decipher.final()]).toString('utf8');
        const pending = PendingLogin.safeParse(JSON.parse(body)).data;
        return pending && pending.until > now ? pending : undefined;
      } catch {
        return undefined; // altered, or sealed with another key
      }
    },
  };
}
