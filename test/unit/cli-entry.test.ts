// The CLI loads only the module of the command asked for: every top-level command, hidden ones too,
// must be found from its own entry, or a call of it loads every command (seconds on a busy node,
// which the GUI's serial console waited for at each open).
import { Command } from 'commander';
import { tsImport } from 'tsx/esm/api';
import { expect, it } from 'vitest';

// Through tsx, as docs-references.test.ts loads the CLI: vitest's transform takes seconds for it.
const { buildProgram, commands } = (await tsImport(
  '../../src/cli/main.ts',
  import.meta.url,
)) as typeof import('../../src/cli/main.js');

it('finds every top-level command, hidden ones too, from its own entry', async () => {
  const all = (await buildProgram()).commands.map((command) => command.name());
  expect(all).toContain('serial-console');
  for (const name of all) {
    const load = commands[name];
    expect(load, `no entry for ${name}`).toBeDefined();
    const program = new Command('vmop');
    (await load!()).register(program);
    expect(program.commands.map((command) => command.name())).toContain(name);
  }
});
