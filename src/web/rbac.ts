// Kubernetes RBAC for a person logged in to the GUI: a SubjectAccessReview naming them as the
// apiserver's own OIDC login would (prefixed user and groups), answered by the cluster's authorizer.
// Answers are kept briefly: a page of 1000 VMs asks once per namespace, not once per VM.
import { AuthorizationV1Api, type KubeConfig } from '@kubernetes/client-node';
import { GROUP } from '../api/virtual-machine.js';
import type { Person } from './sessions.js';

export interface RbacQuestion {
  /** vmop's API group unless named ('' for the core group). */
  group?: string;
  namespace: string;
  verb: string;
  resource: string;
  subresource?: string;
  /** One object; all of the namespace when absent. */
  name?: string;
}

export type RbacCheck = (person: Person, question: RbacQuestion) => Promise<boolean>;

export function rbacCheck(
  kubeConfig: KubeConfig,
  prefixes: { user: string; group: string },
  keepMs = 10_000,
): RbacCheck {
  const api = kubeConfig.makeApiClient(AuthorizationV1Api);
  const answers = new Map<string, { allowed: Promise<boolean>; until: number }>();
  return (person, question) => {
    const key = JSON.stringify([person.user, person.groups, question]);
    const known = answers.get(key);
    if (known && known.until > Date.now()) return known.allowed;
    const allowed = api
      .createSubjectAccessReview({
        body: {
          spec: {
            user: `${prefixes.user}${person.user}`,
            groups: person.groups.map((group) => `${prefixes.group}${group}`),
            resourceAttributes: { group: GROUP, ...question },
          },
        },
      })
      .then((review) => review.status?.allowed === true);
    answers.set(key, { allowed, until: Date.now() + keepMs });
    allowed.catch(() => answers.delete(key));
    if (answers.size > 10_000) for (const [k, v] of answers) if (v.until <= Date.now()) answers.delete(k);
    return allowed;
  };
}
