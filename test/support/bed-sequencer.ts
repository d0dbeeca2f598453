// The order the run takes files in. Four workers share one queue: the unit files first (seconds),
// then the three bed files, each holding a worker to its end, while the fourth worker runs the
// integration files one after the other. A bed waits for its VMs and nodes as much as it computes:
// started together, the beds and the integration tier keep both cores busy to the end, where the
// last bed used to start only once the integration tier was done.
import path from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/** Where each kind of file goes in the queue: lower first, ties in vitest's own order. */
function rank(spec: TestSpecification): number {
  switch (path.basename(spec.moduleId)) {
    case 'dev-bed.test.ts':
      return 1;
    case 'dev-2-bed.test.ts':
      return 2;
    case 'cluster-bed.test.ts':
      return 3;
  }
  return spec.project.name === 'unit' ? 0 : 4;
}

export default class BedSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    // Array.prototype.sort is stable: vitest's order holds within a rank.
    return sorted.sort((a, b) => rank(a) - rank(b));
  }
}
