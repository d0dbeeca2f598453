// The newest configuration wins. During a rolling update (`helm upgrade`) the replicas of the old
// configuration run beside the new ones for a while. A new replica enqueues every VM as its caches
// fill, and an old replica would take those keys and reconcile them by the old configuration (the
// old default runner image, say): the VMs would see the new one only at the next resync, minutes
// later, and an old replica would move a VM the new ones had moved onto the new runner image back
// onto the old one. So the replicas agree in Redis whose configuration is current: the one first
// claimed most recently. A configuration's age is kept in Redis, not taken from the process: an old
// replica whose container restarts mid-rollout (a failed liveness probe under load) is still of the
// old configuration, and takes nothing back (it did, for a while, when the newest process won).
// A replica whose configuration is not current takes no keys until it is current again. Replicas
// of the current configuration renew the claim; when they are all gone (a rollback, a rollout
// given up) it lapses and the others take over.
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { LuaScript } from '../queue/lua-script.js';
import type { Logger } from '../util/logger.js';

export const CONFIGURATION_CLAIM_KEY = 'vmop:managers:configuration';
/** Per configuration digest: when it was first claimed (µs, Redis' clock). */
const SINCE_KEY_PREFIX = 'vmop:managers:configuration-since:';
/** How long a configuration's age outlives its last renewal (a rollout stuck longer forgets it). */
const SINCE_TTL_MS = 7 * 24 * 3600 * 1000;
/** How often a replica renews or checks the claim, and how long a claim outlives its last renewal. */
export const CONFIGURATION_CLAIM_TIMING = { pollMs: 1_000, ttlMs: 10_000 };

/** A digest of the settings that shape what the replicas write (the same for every replica of a release). */
export const configurationDigest = (settings: unknown): string =>
  createHash('sha256').update(JSON.stringify(settings)).digest('hex');

// KEYS[1] the claim ("<since, µs> <digest>"), KEYS[2] this configuration's since; ARGV: this
// configuration's since as this replica knows it (µs; at start, now), digest, TTL (ms), since's
// TTL (ms). Claims for this configuration unless another one was first claimed later; renews it
// when it is this one's. Returns { the current digest, the one stored before ('' if none), this
// configuration's since }.
const CLAIM = new LuaScript(`
redis.call('SET', KEYS[2], ARGV[1], 'NX')
redis.call('PEXPIRE', KEYS[2], ARGV[4])
local since = redis.call('GET', KEYS[2])
local stored = redis.call('GET', KEYS[1])
local at, digest = 0, ''
if stored then
  local sep = string.find(stored, ' ', 1, true)
  at = tonumber(string.sub(stored, 1, sep - 1))
  digest = string.sub(stored, sep + 1)
end
if stored and digest ~= ARGV[2] and tonumber(since) <= at then return { digest, digest, since } end
redis.call('SET', KEYS[1], since .. ' ' .. ARGV[2], 'PX', ARGV[3])
return { ARGV[2], digest, since }
`);

export interface ConfigurationClaim {
  /** Whether this replica's configuration is the current one (as of the last check). */
  readonly current: boolean;
  /** The configuration current before this replica started was another one (an upgrade). */
  readonly replacedAnother: boolean;
  /** Sets what is called when `current` changes (the manager pauses or resumes its workers). */
  onChange(listener: (current: boolean) => void): void;
  stop(): void;
}

/** Claims the current configuration for `digest` and keeps checking it (every pollMs). */
export async function claimConfiguration(opts: {
  redis: Redis;
  digest: string;
  logger: Logger;
  timing?: typeof CONFIGURATION_CLAIM_TIMING;
}): Promise<ConfigurationClaim> {
  const { redis, digest, logger } = opts;
  const { pollMs, ttlMs } = opts.timing ?? CONFIGURATION_CLAIM_TIMING;
  // A manager starting while Redis is away waits for it (alive, not ready), as for its caches.
  const answered = async <T>(call: () => Promise<T>): Promise<T> => {
    for (let tries = 0; ; tries++) {
      try {
        return await call();
      } catch (err) {
        if (tries === 0) logger.warn({ err }, 'waiting for Redis to claim the configuration');
        await sleep(pollMs);
      }
    }
  };
  // Redis' clock: the configurations' ages compare across nodes whatever their clocks say.
  const [seconds, micros] = await answered(() => redis.time());
  const sinceKey = SINCE_KEY_PREFIX + digest;
  // This configuration's since: now if it is new, else as Redis has it; remembered, so that a
  // Redis restarted empty learns it again from the replicas, not from the clock.
  let since = Number(seconds) * 1_000_000 + Number(micros); // µs: below 2^53, exact in Lua too
  const check = async () =>
    (await CLAIM.run(redis, [CONFIGURATION_CLAIM_KEY, sinceKey], [since, digest, ttlMs, SINCE_TTL_MS])) as [
      string,
      string,
      string,
    ];
  const [first, before, stored] = await answered(check);
  since = Number(stored);
  let current = first === digest;
  let listener: ((current: boolean) => void) | undefined;
  const timer = setInterval(() => {
    check().then(
      ([now]) => {
        if ((now === digest) === current) return;
        current = now === digest;
        if (current) logger.info('this replica’s configuration is current again: it takes keys again');
        else
          logger.warn(
            { current: now.slice(0, 12), mine: digest.slice(0, 12) },
            'another configuration, newer than this one, is current (a rolling update?): this replica takes no more keys',
          );
        listener?.(current);
      },
      // Redis away: nothing is known; keep as it is.
      (err: unknown) => logger.debug({ err }, 'could not check the configuration claim'),
    );
  }, pollMs);
  timer.unref();
  return {
    get current() {
      return current;
    },
    replacedAnother: before !== '' && before !== digest,
    onChange: (changed) => {
      listener = changed;
    },
    stop: () => clearInterval(timer),
  };
}
