// Writes the generated CRD YAML into crds/ and the Helm chart, and the people's ClusterRoles into
// the chart (checked in; a unit test fails when any drifts from src/api/).
import { writeFileSync } from 'node:fs';
import { CHART_CRD_DIR, CRDS, CRD_DIR, renderCrdYaml } from '../src/api/crd.js';
import { CHART_USER_ROLES_FILE, renderUserRolesYaml } from '../src/api/user-roles.js';

for (const definition of CRDS) {
  for (const dir of [CRD_DIR, CHART_CRD_DIR]) {
    writeFileSync(`${dir}/${definition.file}`, renderCrdYaml(definition));
    console.log(`wrote ${dir}/${definition.file}`);
  }
}
writeFileSync(CHART_USER_ROLES_FILE, renderUserRolesYaml());
console.log(`wrote ${CHART_USER_ROLES_FILE}`);
