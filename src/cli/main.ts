#!/usr/bin/env node
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';

function newProgram(): Command {
  return new Command('vmop')
    .description('Runs QEMU virtual machines declared by VirtualMachine custom resources')
    .showHelpAfterError();
}

// Each subcommand lives in its own module under src/cli/ and registers itself here. Only the one
// asked for is loaded (the Kubernetes client alone takes half a second to load, which an importer
// or a runner pod need not wait for); without a known one, all are, for the help. Every top-level
// command has its entry, the hidden ones too: `serial-console` without one loaded all of them, and
// each console opened in the GUI waited seconds for that on a busy node.
export const commands: Record<string, () => Promise<{ register: (program: Command) => void }>> = {
  runner: () => import('./runner.js'),
  'serial-console': () => import('./runner.js'),
  queue: () => import('./queue.js'),
  manager: () => import('./manager.js'),
  dev: () => import('./dev.js'),
  vm: () => import('./vm.js'),
  image: () => import('./image.js'),
  import: () => import('./import.js'),
  'export-server': () => import('./export-server.js'),
  'node-agent': () => import('./node-agent.js'),
};

/** The program with every subcommand registered, parsing nothing (scripts/gen-docs.ts reads it). */
export async function buildProgram(): Promise<Command> {
  const program = newProgram();
  // A module with several commands (runner.js) has several entries: registered once.
  const modules = new Set(await Promise.all(Object.values(commands).map((load) => load())));
  for (const module of modules) module.register(program);
  return program;
}

/**
 * Run as the CLI (bin/vmop, the images' entrypoint), not imported by another module. When in
 * doubt it is the CLI: an entrypoint that did nothing would be worse.
 */
function isEntryPoint(): boolean {
  const script = process.argv[1];
  if (script === undefined) return true;
  try {
    return realpathSync(script) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return true;
  }
}

if (isEntryPoint()) {
  // SIGUSR1 would open Node's inspector (a debugger on 127.0.0.1:9229) in whatever vmop process
  // gets it, a runner in every VM's pod among them: a listener of our own keeps it shut.
  process.on('SIGUSR1', () => undefined);
  const asked = commands[process.argv[2] ?? ''];
  const program = asked ? newProgram() : await buildProgram();
  if (asked) (await asked()).register(program);
  await program.parseAsync(process.argv);
}
