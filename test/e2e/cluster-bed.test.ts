// The `cluster` bed (test/support/beds.ts): a bare two-node Kubernetes with every image, for the
// suites that install vmop themselves (each uninstalls it) and the cluster's own.
import { runOnBed } from '../support/beds.js';
import './cluster.suite.js';
import './helm.suite.js';
import './helm-sentinel.suite.js';
import './upgrade.suite.js';

runOnBed('cluster');
