// The people's ClusterRoles (src/api/user-roles.ts): checked into the chart as generated, aggregated
// into the built-in roles, with every namespaced kind of vmop's and nothing the managers own.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CRDS } from '../../../src/api/crd.js';
import { CHART_USER_ROLES_FILE, USER_ROLES, renderUserRolesYaml } from '../../../src/api/user-roles.js';

describe("people's ClusterRoles", () => {
  it("match the chart's generated file (run `npm run gen:crds` after changing them)", () => {
    expect(readFileSync(CHART_USER_ROLES_FILE, 'utf8')).toBe(renderUserRolesYaml());
  });

  it('aggregate into view, edit and admin; cover every namespaced kind; name no status and no lease', () => {
    expect(USER_ROLES.map((role) => [role.metadata.name, Object.keys(role.metadata.labels)])).toEqual([
      ['vmop:admin', ['rbac.authorization.k8s.io/aggregate-to-admin']],
      ['vmop:edit', ['rbac.authorization.k8s.io/aggregate-to-edit']],
      ['vmop:view', ['rbac.authorization.k8s.io/aggregate-to-view']],
    ]);
    const namespaced = CRDS.map(({ crd }) => crd().spec).filter((spec) => spec.scope === 'Namespaced');
    for (const role of USER_ROLES) {
      const resources = role.rules.flatMap((rule) => rule.resources);
      for (const spec of namespaced) expect(resources).toContain(spec.names.plural);
      expect(resources.filter((r) => r.includes('/') || r.includes('lease'))).toEqual([]);
    }
    const view = USER_ROLES.find((role) => role.metadata.name === 'vmop:view')!;
    expect(new Set(view.rules.flatMap((rule) => rule.verbs))).toEqual(new Set(['get', 'list', 'watch']));
  });
});
