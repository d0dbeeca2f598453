// Writes the generated CRD YAML into crds/ (checked in; a unit test fails when it drifts).
import { writeFileSync } from 'node:fs';
import { CRD_FILE, renderCrdYaml } from '../src/api/crd.js';

writeFileSync(CRD_FILE, renderCrdYaml());
console.log(`wrote ${CRD_FILE}`);
