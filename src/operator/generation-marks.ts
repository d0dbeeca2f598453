// The newest spec generation of each VM that any replica's watch has seen, kept in Redis. A
// replica whose cache holds an older VM than that waits before it applies anything, so a spec
// change (say, state Stopped) is never undone by a reconcile on a lagging cache.
import type { Redis } from 'ioredis';
import { KIND } from '../api/virtual-machine.js';
import type { KeySink } from './watch-edge.js';

const HASH = 'vmop:vm-generations';

// Raises the mark, never lowers it: replicas see the same change at slightly different times.
const RAISE = `
local current = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) > current then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return 0`;

/** One VM incarnation: a VM deleted and made again with its name starts at generation 1. */
const field = (key: string, uid: string) => `${key}/${uid}`;

export interface GenerationMarks {
  raise(key: string, uid: string, generation: number): Promise<void>;
  forget(key: string, uid: string): Promise<void>;
  newest(key: string, uid: string): Promise<number>;
}

export function generationMarks(redis: Redis): GenerationMarks {
  redis.defineCommand('vmopRaiseGeneration', { numberOfKeys: 1, lua: RAISE });
  const raise = (redis as Redis & { vmopRaiseGeneration(...args: unknown[]): Promise<number> })
    .vmopRaiseGeneration;
  return {
    async raise(key, uid, generation) {
      await raise.call(redis, HASH, field(key, uid), generation);
    },
    async forget(key, uid) {
      await redis.hdel(HASH, field(key, uid));
    },
    async newest(key, uid) {
      return Number((await redis.hget(HASH, field(key, uid))) ?? 0);
    },
  };
}

/**
 * A replica's watch-edge sink: a VM's spec change raises its mark before its key goes to `enqueue`,
 * so no replica acts on an older spec once any replica has seen a newer one.
 */
export function markingSink(marks: GenerationMarks, enqueue: KeySink): KeySink {
  return async (key, event) => {
    if (event.kind === KIND && event.uid && key.startsWith('vm:')) {
      if (event.type === 'deleted') await marks.forget(key, event.uid);
      else if (event.generation) await marks.raise(key, event.uid, event.generation);
    }
    await enqueue(key, event);
  };
}
