import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { BackoffSchema } from '../queue/backoff.js';

/** A Node name: a DNS subdomain. */
const NodeName = z
  .string()
  .max(253)
  .regex(
    /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/,
    'must be a DNS subdomain (lower case)',
  );

export const NodeAgentOptions = z.object({
  /** A kubeconfig file; default: $KUBECONFIG, ~/.kube/config or the in-cluster service account. */
  kubeconfig: z.string().optional(),
  nodeName: NodeName.default(() => os.hostname().toLowerCase()),
  /** Pod directories and provisioned volumes. */
  stateDir: z
    .string()
    .min(1)
    .transform((dir) => path.resolve(dir)),
  /** Environment defaults for runners (e.g. VMOP_REDIS_URL, VMOP_IMAGE_REPOSITORY). */
  runnerEnv: z
    .record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'not an environment variable name'), z.string())
    .default({}),
  /** Only pods in these namespaces; all when empty. */
  namespaces: z.array(z.string().min(1)).default([]),
  /** Delay before restarting an exited container: doubling from baseMs up to capMs (kubelet: 10 s to 5 min). */
  restartBackoff: BackoffSchema.default({ baseMs: 10_000, capMs: 60_000 }),
  /** The node Lease's duration; it is renewed every quarter of it. */
  leaseDurationSeconds: z.number().int().min(4).default(40),
  /** How long runners get to stop when the agent stops (at most their pod's grace period). */
  shutdownGraceSeconds: z.number().int().nonnegative().default(30),
});
export type NodeAgentOptions = z.input<typeof NodeAgentOptions>;
