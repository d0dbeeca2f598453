// How many live migrations run at once (KubeVirt's parallelMigrationsPerCluster and
// parallelOutboundMigrationsPerNode): slots in the Redis all manager replicas share, so two
// replicas never both take the last one. Those waiting get slots in the order they first asked;
// one whose node has none free lets those behind it on other nodes go first.
import type { Redis } from 'ioredis';
import { LuaScript } from '../queue/lua-script.js';

export interface MigrationLimits {
  perCluster: number;
  outboundPerNode: number;
}

export type SlotAnswer = { granted: true } | { granted: false; waiting: string };

export interface MigrationSlots {
  /** A slot for migration `id` of the VM `vmKey` from `node`: granted, or why it waits. */
  take(vmKey: string, id: string, node: string): Promise<SlotAnswer>;
  /** The migration ended: its slot is free. */
  release(vmKey: string, id: string): Promise<void>;
}

const RUNNING_KEY = 'vmop:migrations:running';
const WAITING_KEY = 'vmop:migrations:waiting';

// KEYS: running (vmKey -> {id, node, at}), waiting (vmKey -> {id, node, since, seen}).
// ARGV: vmKey, id, node, runningLeaseMs, waitingLeaseMs, perCluster, perNode.
// Returns {1} when granted, else {0, under way in the cluster, under way from the node, asked before}.
const TAKE = new LuaScript(`
local vmKey, id, node = ARGV[1], ARGV[2], ARGV[3]
local runningLease, waitingLease = tonumber(ARGV[4]), tonumber(ARGV[5])
local perCluster, perNode = tonumber(ARGV[6]), tonumber(ARGV[7])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local total, onNode = 0, {}
local running = redis.call('HGETALL', KEYS[1])
for i = 1, #running, 2 do
  local key, slot = running[i], cjson.decode(running[i + 1])
  if key == vmKey and slot.id == id then return {1} end
  -- A lapsed lease (a replica died before it let go) or this VM's earlier migration: free.
  if key == vmKey or now - slot.at > runningLease then
    redis.call('HDEL', KEYS[1], key)
  else
    total = total + 1
    onNode[slot.node] = (onNode[slot.node] or 0) + 1
  end
end
local since = now
local mine = redis.call('HGET', KEYS[2], vmKey)
if mine then
  local earlier = cjson.decode(mine)
  if earlier.id == id then since = earlier.since end
end
redis.call('HSET', KEYS[2], vmKey, cjson.encode({id = id, node = node, since = since, seen = now}))
local queue = {}
local waiting = redis.call('HGETALL', KEYS[2])
for i = 1, #waiting, 2 do
  local entry = cjson.decode(waiting[i + 1])
  -- One no longer asking (its operation ended) holds no place.
  if now - entry.seen > waitingLease then
    redis.call('HDEL', KEYS[2], waiting[i])
  else
    table.insert(queue, {key = waiting[i], node = entry.node, since = entry.since})
  end
end
table.sort(queue, function(a, b)
  if a.since == b.since then return a.key < b.key end
  return a.since < b.since
end)
local ahead = 0
for _, entry in ipairs(queue) do
  local fromNode = onNode[entry.node] or 0
  local free = total < perCluster and fromNode < perNode
  if entry.key == vmKey then
    if not free then return {0, total, fromNode, ahead} end
    redis.call('HDEL', KEYS[2], vmKey)
    redis.call('HSET', KEYS[1], vmKey, cjson.encode({id = id, node = node, at = now}))
    return {1}
  end
  if free then
    total = total + 1
    onNode[entry.node] = fromNode + 1
  end
  ahead = ahead + 1
end
return {0, total, 0, ahead}
`);

const RELEASE = new LuaScript(`
local slot = redis.call('HGET', KEYS[1], ARGV[1])
if slot and cjson.decode(slot).id == ARGV[2] then redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
`);

export function migrationSlots(
  redis: Redis,
  limits: MigrationLimits,
  leases: { runningMs: number; waitingMs: number },
): MigrationSlots {
  return {
    async take(vmKey, id, node) {
      const args = [
        vmKey,
        id,
        node,
        leases.runningMs,
        leases.waitingMs,
        limits.perCluster,
        limits.outboundPerNode,
      ];
      const [granted, total, fromNode, ahead] = (await TAKE.run(
        redis,
        [RUNNING_KEY, WAITING_KEY],
        args,
      )) as number[];
      if (granted === 1) return { granted: true };
      return {
        granted: false,
        waiting:
          `waiting for a free migration slot: ${total} of ${limits.perCluster} under way in the cluster, ` +
          `${fromNode} of ${limits.outboundPerNode} from ${node}; ${ahead} asked before`,
      };
    },
    async release(vmKey, id) {
      await RELEASE.run(redis, [RUNNING_KEY], [vmKey, id]);
    },
  };
}
