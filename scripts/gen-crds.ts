// Writes the generated CRD YAML into crds/ and the Helm chart (checked in; a unit test fails when
// either drifts from src/api/).
import { writeFileSync } from 'node:fs';
import { CHART_CRD_FILE, CRD_FILE, renderCrdYaml } from '../src/api/crd.js';

for (const file of [CRD_FILE, CHART_CRD_FILE]) {
  writeFileSync(file, renderCrdYaml());
  console.log(`wrote ${file}`);
}
