// The `dev` bed (test/support/beds.ts): `vmop dev up`, one node, for these suites in this order.
// The fault suite kills one part after another: it runs last.
import { runOnBed } from '../support/beds.js';
import './lifecycle.suite.js';
import './operations.suite.js';
import './start-and-provisioning.suite.js';
import './snapshots.suite.js';
import './tenancy.suite.js';
import './web.suite.js';
import '../faults/faults.suite.js';

runOnBed('dev');
