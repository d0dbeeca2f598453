// Logins kept in the Redis the manager replicas share, so any replica answers any request. The
// browser holds only a random id (an HttpOnly cookie); Redis holds its digest, so a copy of Redis
// names no usable cookie. Logout deletes the session at once; it also ends when idle or too old.
import { createHash, randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { z } from 'zod';

export const Person = z.object({
  /** As VM-Operator's permissions name users. */
  user: z.string().min(1),
  /** As VM-Operator's permissions name roles. */
  groups: z.array(z.string()),
  /** For display only. */
  name: z.string().optional(),
});
export type Person = z.infer<typeof Person>;

const Session = z.object({
  person: Person,
  /** The token every state-changing request must carry (X-CSRF-Token). */
  csrf: z.string(),
  createdAt: z.number(),
});
export type Session = z.infer<typeof Session> & { id: string };

/** What a login in progress keeps between the redirect to the provider and the way back. */
const PendingLogin = z.object({ verifier: z.string(), nonce: z.string(), returnTo: z.string() });
export type PendingLogin = z.infer<typeof PendingLogin>;

const LOGIN_SECONDS = 600;
/** What Redis keeps of a secret token: its sha256, so a copy of Redis names no usable one. */
export const digest = (token: string) => createHash('sha256').update(token).digest('hex');
const sessionKey = (id: string) => `vmop:web:session:${digest(id)}`;
const loginKey = (state: string) => `vmop:web:login:${digest(state)}`;
export const randomToken = () => randomBytes(32).toString('base64url');

export function sessionStore(redis: Redis, limits: { idleSeconds: number; maxSeconds: number }) {
  return {
    async create(person: Person): Promise<Session> {
      const id = randomToken();
      const session = { person, csrf: randomToken(), createdAt: Date.now() };
      await redis.set(sessionKey(id), JSON.stringify(session), 'EX', limits.idleSeconds);
      return { ...session, id };
    },
    /** The session, kept alive by its use (never past its maximum age). */
    async read(id: string): Promise<Session | undefined> {
      const text = await redis.get(sessionKey(id));
      const session = text === null ? undefined : Session.safeParse(JSON.parse(text)).data;
      if (!session) return undefined;
      // Whole seconds left, rounded up: the session lasts its full maximum age, not a second less.
      const left = Math.ceil((session.createdAt + limits.maxSeconds * 1000 - Date.now()) / 1000);
      if (left <= 0) {
        await redis.del(sessionKey(id));
        return undefined;
      }
      await redis.expire(sessionKey(id), Math.min(limits.idleSeconds, left));
      return { ...session, id };
    },
    async delete(id: string): Promise<void> {
      await redis.del(sessionKey(id));
    },
    async beginLogin(state: string, pending: PendingLogin): Promise<void> {
      await redis.set(loginKey(state), JSON.stringify(pending), 'EX', LOGIN_SECONDS);
    },
    /** The pending login of `state`, once: a second use of the same callback finds nothing. */
    async finishLogin(state: string): Promise<PendingLogin | undefined> {
      const text = await redis.getdel(loginKey(state));
      return text === null ? undefined : PendingLogin.safeParse(JSON.parse(text)).data;
    },
  };
}
export type SessionStore = ReturnType<typeof sessionStore>;
