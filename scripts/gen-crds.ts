// Writes the generated CRD YAML into crds/ and the Helm chart (checked in; a unit test fails when
// either drifts from src/api/).
import { writeFileSync } from 'node:fs';
import { CHART_CRD_DIR, CRDS, CRD_DIR, renderCrdYaml } from '../src/api/crd.js';

for (const definition of CRDS) {
  for (const dir of [CRD_DIR, CHART_CRD_DIR]) {
    writeFileSync(`${dir}/${definition.file}`, renderCrdYaml(definition));
    console.log(`wrote ${dir}/${definition.file}`);
  }
}
