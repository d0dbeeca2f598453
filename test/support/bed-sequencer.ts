// Orders the e2e bed files longest first (two run at a time: the longest must not start last);
// every other file keeps vitest's own order.
import path from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/** The bed files, longest first (see the time report at the end of a run). */
export const BED_FILES = ['dev-bed.test.ts', 'dev-2-bed.test.ts', 'cluster-bed.test.ts'];

export default class BedSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rank = (spec: TestSpecification) => BED_FILES.indexOf(path.basename(spec.moduleId));
    const sorted = await super.sort(files);
    const beds = sorted.filter((spec) => rank(spec) >= 0).sort((a, b) => rank(a) - rank(b));
    return [...sorted.filter((spec) => rank(spec) < 0), ...beds];
  }
}
