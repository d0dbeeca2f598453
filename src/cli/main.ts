#!/usr/bin/env node
import { Command } from 'commander';

const program = new Command('vmop')
  .description('Runs QEMU virtual machines declared by VirtualMachine custom resources')
  .showHelpAfterError();

// Each subcommand lives in its own module under src/cli/ and registers itself here. Only the one
// asked for is loaded (the Kubernetes client alone takes half a second to load, which an importer
// or a runner pod need not wait for); without a known one, all are, for the help.
const commands: Record<string, () => Promise<{ register: (program: Command) => void }>> = {
  runner: () => import('./runner.js'),
  queue: () => import('./queue.js'),
  manager: () => import('./manager.js'),
  dev: () => import('./dev.js'),
  vm: () => import('./vm.js'),
  import: () => import('./import.js'),
};
const asked = commands[process.argv[2] ?? ''];
for (const load of asked ? [asked] : Object.values(commands)) (await load()).register(program);

await program.parseAsync(process.argv);
