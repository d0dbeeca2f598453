#!/usr/bin/env node
import { Command } from 'commander';
import { register as registerRunner } from './runner.js';
import { register as registerQueue } from './queue.js';
import { register as registerManager } from './manager.js';
import { register as registerDev } from './dev.js';
import { register as registerVm } from './vm.js';
import { register as registerImport } from './import.js';

const program = new Command('vmop')
  .description('Runs QEMU virtual machines declared by VirtualMachine custom resources')
  .showHelpAfterError();

// Each subcommand lives in its own module under src/cli/ and registers itself here.
const registrations: Array<(program: Command) => void> = [
  registerRunner,
  registerQueue,
  registerManager,
  registerDev,
  registerVm,
  registerImport,
];

for (const register of registrations) register(program);

await program.parseAsync(process.argv);
