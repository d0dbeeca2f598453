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

/** What Redis keeps of a secret token: its sha256, so a copy of Redis names no usable one. */
export const digest = (token: string) => createHash('sha256').update(token).digest('hex');
const sessionKeyOfDigest = (idDigest: string) => `vmop:web:session:${idDigest}`;
const sessionKey = (id: string) => sessionKeyOfDigest(digest(id));
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
    /** Which of the sessions (named by their ids' digests) exist, without keeping them alive. */
    async aliveByDigest(idDigests: string[]): Promise<boolean[]> {
      if (idDigests.length === 0) return [];
      const answers = await redis.pipeline(idDigests.map((d) => ['exists', sessionKeyOfDigest(d)])).exec();
      return (answers ?? []).map(([err, count]) => err === null && count === 1);
    },
    async delete(id: string): Promise<void> {
      await redis.del(sessionKey(id));
    },
  };
}
export type SessionStore = ReturnType<typeof sessionStore>;
