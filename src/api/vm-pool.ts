// VM-Operator's VmPool custom resource: VMs that name the pool in spec.pools are assigned to its
// users one at a time (status.assignment of the VM), kept for them for `retention` after they
// last used it. VM-Operator's manifests apply unchanged.
import { z } from 'zod';
import { GROUP, ObjectMeta, VERSION, permissionGrant } from './virtual-machine.js';

export const POOL_KIND = 'VmPool';
export const POOL_PLURAL = 'vmpools';
export const POOL_SINGULAR = 'vmpool';

/** An ISO 8601 time or duration, VM-Operator's pattern. */
const RETENTION_PATTERN =
  '^(?:\\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\\d|3[01])T(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d{1,9})?(?:Z|[+-](?:[01]\\d|2[0-3])(?:|:?[0-5]\\d))|P(?:\\d+Y)?(?:\\d+M)?(?:\\d+W)?(?:\\d+D)?(?:T(?:\\d+[Hh])?(?:\\d+[Mm])?(?:\\d+(?:\\.\\d{1,9})?[Ss])?)?)$';

export const PoolSpec = z.object({
  retention: z
    .string()
    .regex(new RegExp(RETENTION_PATTERN))
    .default('PT1h')
    .describe(
      'How long an assignment is kept after its user last used the VM (an ISO 8601 duration), or until when (an ISO 8601 time).',
    ),
  loginOnAssignment: z
    .boolean()
    .default(false)
    .describe("Log the user in on the guest when the VM is assigned (VM-Operator's auto-login)."),
  permissions: z
    .array(permissionGrant(['accessConsole']))
    .describe('Who may get a VM of the pool, and what they may do with it.'),
});

export const VmPool = z.object({
  apiVersion: z.literal(`${GROUP}/${VERSION}`),
  kind: z.literal(POOL_KIND),
  metadata: ObjectMeta,
  spec: PoolSpec,
});

export type VmPool = z.infer<typeof VmPool>;
export type PoolSpec = z.infer<typeof PoolSpec>;

/** The pools of a namespace as the custom objects API names them. */
export function poolApiRef(namespace: string) {
  return { group: GROUP, version: VERSION, plural: POOL_PLURAL, namespace };
}
