// The user documentation cannot drift from the code: the references in docs/reference/ are what
// scripts/gen-docs.ts makes from the sources, the prose names flags and values that exist, and
// every link between the pages leads somewhere.
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { tsImport } from 'tsx/esm/api';
import { beforeAll, describe, expect, it } from 'vitest';
import type { JsonSchema } from '../../scripts/gen-docs.js';

// Loaded through tsx, as `npm run docs` does, not through vitest's transform: the CLI's
// definitions pull in some 200 modules, which vitest takes seconds to transform one by one.
const { CLI_REFERENCE, HELM_VALUES_REFERENCE, buildProgram, generatedReferences, helmValueRows } =
  (await tsImport(
    '../../scripts/gen-docs.ts',
    import.meta.url,
  )) as typeof import('../../scripts/gen-docs.js');

function markdownFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name);
    return entry.isDirectory() ? markdownFiles(file) : file.endsWith('.md') ? [file] : [];
  });
}

/** A page's lines outside code blocks. */
function outsideCode(file: string): string[] {
  let fenced = false;
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((line) => {
      const fence = /^\s*```/.test(line);
      if (fence) fenced = !fenced;
      return !fenced && !fence;
    });
}

/** GitHub's anchors for a page's headings. */
function anchors(file: string): Set<string> {
  const seen = new Map<string, number>();
  const result = new Set<string>();
  for (const line of outsideCode(file)) {
    const heading = /^#{1,6} (.*)$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const slug = heading
      .toLowerCase()
      .replace(/[^\p{L}\p{N} _-]/gu, '')
      .replace(/ /g, '-');
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    result.add(count === 0 ? slug : `${slug}-${count}`);
  }
  return result;
}

/** The first cells of a page's tables under `header` (the row that starts with it). */
function firstCells(file: string, header: string): string[] {
  const lines = readFileSync(file, 'utf8').split('\n');
  const start = lines.findIndex((line) => line.startsWith(header));
  expect(start, `${file} has no table starting with ${header}`).toBeGreaterThanOrEqual(0);
  const cells: string[] = [];
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith('|')) break;
    cells.push(line.split(/(?<!\\)\|/)[1]!.trim());
  }
  return cells;
}

describe('generated references', () => {
  let generated: Array<{ file: string; content: string }>;
  beforeAll(async () => {
    generated = await generatedReferences();
  });

  it.each([HELM_VALUES_REFERENCE, CLI_REFERENCE])('%s is what `npm run docs` makes', (file) => {
    const committed = existsSync(file) ? readFileSync(file, 'utf8') : '(missing)';
    const content = generated.find((reference) => reference.file === file)!.content;
    expect(committed, `${file} is out of date: run \`npm run docs\` and commit it`).toBe(content);
  });
});

describe('hand-written tables', () => {
  it('docs/configuration.md names only flags that `vmop manager` has', async () => {
    const manager = (await buildProgram()).commands.find((command) => command.name() === 'manager')!;
    const flags = new Set(manager.options.flatMap((option) => [option.long, option.short]));
    const named = firstCells('docs/configuration.md', '| flag |').flatMap((cell) =>
      [...cell.matchAll(/`(-[\w-]+)(?:, (--[\w-]+))?[^`]*`/g)].flatMap((match) =>
        match.slice(1).filter((flag) => flag !== undefined),
      ),
    );
    expect(named.length).toBeGreaterThan(10);
    expect(named.filter((flag) => !flags.has(flag))).toEqual([]);
  });

  it('docs/installing.md names only values that the chart has', () => {
    const paths = new Set(
      helmValueRows(
        JSON.parse(readFileSync('helm/vmop/values.schema.json', 'utf8')) as JsonSchema,
        readFileSync('helm/vmop/values.yaml', 'utf8'),
      ).map((row) => row.path),
    );
    const unknown: string[] = [];
    let named = 0;
    for (const cell of firstCells('docs/installing.md', '| value |')) {
      // `runner.image.repository`, `.tag`: a leading dot is the previous path's sibling.
      let previous = '';
      for (const [, name] of cell.matchAll(/`([\w.*]+)`/g)) {
        const full = name!.startsWith('.') ? previous.replace(/\.[^.]+$/, '') + name : name!;
        previous = full;
        named++;
        if (!paths.has(full.replace(/\.\*$/, ''))) unknown.push(full);
      }
    }
    expect(named).toBeGreaterThan(30);
    expect(unknown).toEqual([]);
  });
});

describe('links between the pages', () => {
  const pages = ['README.md', ...markdownFiles('docs')];

  it.each(pages)('every relative link in %s leads to a file, and an anchor to a heading', (page) => {
    const broken: string[] = [];
    for (const line of outsideCode(page)) {
      for (const [, target] of line.replace(/`[^`]*`/g, '').matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^[a-z+]+:/.test(target!)) continue;
        const [file, anchor] = target!.split('#') as [string, string | undefined];
        const resolved = file ? path.join(path.dirname(page), file) : page;
        if (!existsSync(resolved)) broken.push(`${target} (no ${resolved})`);
        else if (anchor !== undefined && resolved.endsWith('.md') && !anchors(resolved).has(anchor))
          broken.push(`${target} (no heading #${anchor} in ${resolved})`);
      }
    }
    expect(broken).toEqual([]);
  });
});
