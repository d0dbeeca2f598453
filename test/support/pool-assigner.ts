// A process that assigns pool VMs as a manager replica's web GUI would (its own Kubernetes and Redis
// connections): `tsx test/support/pool-assigner.ts <kubeconfig> <redis-url> <namespace> <pool> <user>...`
// asks for all users at once and prints one JSON line of [user, outcome] pairs.
import { KubeConfig } from '@kubernetes/client-node';
import { makeKubeClients } from '../../src/kube/clients.js';
import { assignFromPool } from '../../src/pools/assign.js';
import { redisPoolLock } from '../../src/pools/pool-lock.js';
import { openRedis } from '../../src/queue/connection.js';
import { eventRecorder } from '../../src/reconcilers/events.js';
import { createLogger } from '../../src/util/logger.js';

const [kubeconfigPath, redisUrl, namespace, pool, ...users] = process.argv.slice(2);
const kubeConfig = new KubeConfig();
kubeConfig.loadFromFile(kubeconfigPath!);
const clients = makeKubeClients(kubeConfig);
const redis = openRedis(redisUrl!);
const deps = {
  clients,
  lock: redisPoolLock(redis),
  recordEvent: eventRecorder(clients, createLogger('pool-assigner'), () => new Date()),
};
const outcomes = await Promise.all(
  users.map(async (user) => [user, await assignFromPool(deps, { namespace: namespace!, pool: pool!, user })]),
);
console.log(JSON.stringify(outcomes));
redis.disconnect();
