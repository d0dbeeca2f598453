// The web GUI's settings (manager flags, the chart's `web` values), validated by zod.
import { z } from 'zod';

export const WebOptions = z.object({
  port: z.number().int().min(0).max(65535),
  host: z.string().default('0.0.0.0'),
  /** Where people reach the GUI (the Ingress' URL); the login comes back to <publicUrl>/auth/callback. */
  publicUrl: z.url(),
  oidc: z.object({
    issuer: z.url(),
    clientId: z.string().min(1),
    clientSecret: z.string().min(1),
    scopes: z.string().default('openid profile email groups'),
    /** The claim that names the person (VM-Operator's `user` in permissions). */
    usernameClaim: z.string().default('preferred_username'),
    /** The claim that lists the person's groups (VM-Operator's `role`s). */
    groupsClaim: z.string().default('groups'),
  }),
  /**
   * How the person is named to Kubernetes RBAC (SubjectAccessReview), as the apiserver's own
   * --oidc-username-prefix/--oidc-groups-prefix would: prefixed, so that no login can name itself
   * system:masters or another cluster identity.
   */
  kubernetesUserPrefix: z.string().default('oidc:'),
  kubernetesGroupPrefix: z.string().default('oidc:'),
  /** How long a login lasts without use, and at most. */
  sessionIdleSeconds: z
    .number()
    .int()
    .positive()
    .default(8 * 3600),
  sessionMaxSeconds: z
    .number()
    .int()
    .positive()
    .default(24 * 3600),
  /** How often the admin view's 24-hour chart of CPUs and RAM in use gets a point. */
  usageSampleSeconds: z.number().int().min(1).max(3600).default(60),
});
export type WebOptions = z.input<typeof WebOptions>;
export type WebSettings = z.infer<typeof WebOptions>;
