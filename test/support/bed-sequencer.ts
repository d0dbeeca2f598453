// The order the run takes files in. Three workers share one queue: the unit files first (seconds),
// then the two longest bed files, each holding a worker to its end, while the third worker runs
// the integration files one after the other; the last bed takes the first worker that frees up.
// A bed waits mostly for its VMs and nodes, not for the CPU: the integration tier beside them
// costs the run less than the same tier before them. (A fourth worker, running all three beds
// from the start, made the run 7 % longer: the two cores were then busy to the last second.)
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
      return 4;
  }
  return spec.project.name === 'unit' ? 0 : 3;
}

export default class BedSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    // Array.prototype.sort is stable: vitest's order holds within a rank.
    return sorted.sort((a, b) => rank(a) - rank(b));
  }
}
