// Modules import each other in one direction: a cycle makes load order matter and hides which
// module is the leaf. Relative imports of src/ only (type-only imports count too: they couple).
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name);
    return entry.isDirectory() ? sourceFiles(file) : file.endsWith('.ts') ? [file] : [];
  });
}

function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(/from '(\.{1,2}\/[^']+)\.js'/g)].map((match) =>
    path.join(path.dirname(file), `${match[1]}.ts`),
  );
}

/** Every cycle found by a depth-first walk, as the chain of files that closes it. */
function importCycles(files: string[]): string[][] {
  const graph = new Map(files.map((file) => [file, importsOf(file)]));
  const cycles: string[][] = [];
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (file: string, chain: string[]) => {
    if (state.get(file) === 'done') return;
    if (state.get(file) === 'visiting') {
      cycles.push([...chain.slice(chain.indexOf(file)), file]);
      return;
    }
    state.set(file, 'visiting');
    for (const next of graph.get(file) ?? []) visit(next, [...chain, file]);
    state.set(file, 'done');
  };
  for (const file of files) visit(file, []);
  return cycles;
}

describe('imports', () => {
  it('form no cycle in src/', () => {
    expect(importCycles(sourceFiles('src')).map((cycle) => cycle.join(' → '))).toEqual([]);
  });

  it('finds a cycle where there is one', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'vmop-imports-'));
    const write = (name: string, text: string) => writeFileSync(path.join(dir, name), text);
    write('a.ts', "import { b } from './b.js';\n");
    write('b.ts', "import type { c } from './c.js';\n");
    write('c.ts', "import { a } from './a.js';\n");
    write('leaf.ts', "import { a } from './a.js';\n");
    const cycles = importCycles(sourceFiles(dir)).map((cycle) => cycle.map((file) => path.basename(file)));
    rmSync(dir, { recursive: true });
    expect(cycles).toEqual([['a.ts', 'b.ts', 'c.ts', 'a.ts']]);
  });
});
