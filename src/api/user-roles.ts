// vmop's verbs for people, the Kubernetes way (as KubeVirt's `kubevirt.io:*`): three ClusterRoles
// aggregated into the built-in `view`, `edit` and `admin`, so whoever may edit a namespace may run
// VMs there with no hand-made Role, and never more than that namespace. No role names a status
// subresource (statuses are the managers' word: routes and consoles trust them) nor the address
// leases (cluster-wide: they would show which namespace holds which address).
import { stringify } from 'yaml';
import { CRDS } from './crd.js';
import { GROUP } from './virtual-machine.js';
import { CLASS_PLURAL } from './virtual-machine-class.js';

const READ = ['get', 'list', 'watch'];
const WRITE = ['create', 'update', 'patch', 'delete', 'deletecollection'];

/** The namespaced kinds a namespace's people work with: every namespaced CRD of vmop's. */
export const NAMESPACED_PLURALS = CRDS.map(({ crd }) => crd().spec)
  .filter((spec) => spec.scope === 'Namespaced')
  .map((spec) => spec.names.plural);

type Level = 'view' | 'edit' | 'admin';

function userRole(level: Level) {
  const verbs = level === 'view' ? READ : [...READ, ...WRITE];
  return {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRole',
    metadata: {
      name: `vmop:${level}`,
      labels: { [`rbac.authorization.k8s.io/aggregate-to-${level}`]: 'true' },
    },
    rules: [
      { apiGroups: [GROUP], resources: NAMESPACED_PLURALS, verbs },
      // The classes a VM may name (cluster-wide: this counts only where the role is bound so).
      { apiGroups: [GROUP], resources: [CLASS_PLURAL], verbs: READ },
    ],
  };
}

export const USER_ROLES = (['admin', 'edit', 'view'] as const).map(userRole);

/** Where gen:crds writes them for the chart (templates/user-roles.yaml adds its labels). */
export const CHART_USER_ROLES_FILE = 'helm/vmop/files/user-roles.yaml';

export function renderUserRolesYaml(): string {
  return (
    '# Generated from src/api/user-roles.ts by `npm run gen:crds`. Do not edit.\n' +
    USER_ROLES.map((role) => stringify(role, { lineWidth: 0 })).join('---\n')
  );
}
