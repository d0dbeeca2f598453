// The `dev-2` bed (test/support/beds.ts): `vmop dev up --nodes 2 --redis sentinel`, for what
// happens between nodes, and disk imports, guest ports, disks and classes (here to balance the beds'
// times: the dev bed's suites took 2192 s, these 1467 s). The node-loss suite
// brings its node back; the Redis suite loses the whole set (it comes back empty): they run last.
import { runOnBed } from '../support/beds.js';
import './addresses.suite.js';
import './migration.suite.js';
import './monitoring.suite.js';
import './imports.suite.js';
import './guest-ports.suite.js';
import './disks.suite.js';
import './classes.suite.js';
import './nodes.suite.js';
import './redis-failover.suite.js';

runOnBed('dev-2');
