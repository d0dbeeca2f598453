// The web GUI's settings (manager flags, the chart's `web` values), validated by zod.
import { z } from 'zod';

/** Host names of this machine (plain HTTP is all right there: the test bed's). */
export const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]']);

export const WebOptions = z
  .object({
    port: z.number().int().min(0).max(65535),
    host: z.string().default('0.0.0.0'),
    /** Where people reach the GUI (the Ingress' URL); the login comes back to <publicUrl>/auth/callback. */
    publicUrl: z.url(),
    /**
     * Serve a plain http public URL (not this machine's) anyway, with cookies that are not Secure:
     * only behind something that encrypts on the way (a service mesh, a VPN).
     */
    allowPlainHttp: z.boolean().default(false),
    /** Requests to /auth/ (unauthenticated) per minute and client address, per replica. */
    loginsPerMinute: z.number().int().positive().default(120),
    /** Logins one person may finish per minute, per replica: a leaked login cannot flood sessions. */
    loginsPerPersonPerMinute: z.number().int().positive().default(10),
    /**
     * The proxies in front of the GUI (an Ingress controller's addresses or subnets): the client's
     * address is taken from their X-Forwarded-For, so each person behind them has a limit of their
     * own; anyone else's X-Forwarded-For is ignored.
     */
    trustedProxies: z.array(z.union([z.ipv4(), z.cidrv4(), z.ipv6(), z.cidrv6()])).default([]),
    oidc: z.object({
      issuer: z.url(),
      clientId: z.string().min(1),
      clientSecret: z.string().min(1),
      scopes: z.string().default('openid profile email groups'),
      /**
       * The claim that names the person (VM-Operator's `user` in permissions), as kube-apiserver's
       * --oidc-username-claim: by default `sub`, which the provider assigns; `email` counts only
       * when verified; choose `preferred_username` only where people cannot pick their own.
       */
      usernameClaim: z.string().default('sub'),
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
  })
  .refine((web) => !plainHttpElsewhere(web.publicUrl) || web.allowPlainHttp, {
    path: ['publicUrl'],
    message:
      'is plain http: logins and session cookies would cross the network unencrypted; serve the GUI over https, or set allowPlainHttp (--web-allow-plain-http) when something else encrypts the way',
  });
export type WebOptions = z.input<typeof WebOptions>;
export type WebSettings = z.infer<typeof WebOptions>;

const plainHttpElsewhere = (publicUrl: string) => {
  const url = new URL(publicUrl);
  return url.protocol === 'http:' && !LOOPBACK.has(url.hostname);
};

/** Whether the GUI's cookies cannot be Secure (browsers keep Secure cookies of http://localhost). */
export const servesPlainHttp = (web: WebSettings) => plainHttpElsewhere(web.publicUrl);
