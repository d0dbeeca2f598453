// Writes the generated references in docs/reference/ (checked in; a unit test fails when either
// drifts from its source): the Helm values from the chart's values.schema.json and values.yaml,
// the CLI from its commander definitions. Run by `npm run docs`.
import { mkdirSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Help, type Argument, type Command, type Option } from 'commander';
import { isMap, isScalar, parseDocument, stringify, type Node as YamlNode } from 'yaml';
import { buildProgram } from '../src/cli/main.js';

export { buildProgram };

export const HELM_VALUES_REFERENCE = 'docs/reference/helm-values.md';
export const CLI_REFERENCE = 'docs/reference/cli.md';
const SCHEMA_FILE = 'helm/vmop/values.schema.json';
const VALUES_FILE = 'helm/vmop/values.yaml';
/** The checkout: file names above are relative to it. */
const ROOT = fileURLToPath(new URL('..', import.meta.url));

// ---- Markdown --------------------------------------------------------------------------------

/** Prose from a description or comment: code spans kept, `<` and `*` outside them escaped. */
function text(words: string): string {
  return words
    .split(/(`[^`]*`)/)
    .map((part, i) => (i % 2 === 1 ? part : part.replace(/</g, '&lt;').replace(/\*/g, '\\*')))
    .join('');
}

/** Prose for a table cell: on one line, `|` escaped (also in code spans, as GFM wants). */
function cell(words: string): string {
  return text(words)
    .replace(/\|/g, '\\|')
    .replace(/\s*\n\s*/g, ' ');
}

/** A code span that holds any text (a backtick inside gets a longer fence). */
function code(text: string): string {
  const fence = text.includes('`') ? '``' : '`';
  const pad = text.startsWith('`') || text.endsWith('`') ? ' ' : '';
  return `${fence}${pad}${text}${pad}${fence}`;
}

function table(headers: string[], rows: string[][]): string[] {
  return [
    `| ${headers.join(' | ')} |`,
    `|${headers.map(() => '---').join('|')}|`,
    ...rows.map((row) => `| ${row.map((c) => c || ' ').join(' | ')} |`),
  ];
}

/** A YAML value on one line, as values.yaml would have it: `{}`, `'8.0'`, `{cpu: 50m}`. */
function yamlValue(value: unknown): string {
  return stringify(value, { collectionStyle: 'flow', singleQuote: true, lineWidth: 0 }).trim();
}

// ---- Helm values -----------------------------------------------------------------------------

/** The part of JSON Schema that values.schema.json uses. */
export interface JsonSchema {
  $ref?: string;
  type?: string | string[];
  description?: string;
  default?: unknown;
  enum?: unknown[];
  const?: unknown;
  properties?: Record<string, JsonSchema>;
  additionalProperties?: boolean | JsonSchema;
  required?: string[];
  items?: JsonSchema;
  uniqueItems?: boolean;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  if?: JsonSchema;
  then?: JsonSchema;
  anyOf?: JsonSchema[];
  [keyword: string]: unknown;
}

/** One key path of the values: what the reference's table shows. */
export interface HelmValueRow {
  path: string;
  type: string;
  default: string;
  description: string;
}

function resolve(schema: JsonSchema, root: JsonSchema): JsonSchema {
  if (schema.$ref === undefined) return schema;
  if (!schema.$ref.startsWith('#/')) throw new Error(`${SCHEMA_FILE}: cannot follow $ref ${schema.$ref}`);
  const target = schema.$ref
    .slice(2)
    .split('/')
    .reduce<unknown>((node, key) => (node as Record<string, unknown> | undefined)?.[key], root);
  if (target === undefined) throw new Error(`${SCHEMA_FILE}: $ref ${schema.$ref} names nothing`);
  return resolve(target as JsonSchema, root);
}

function range(schema: JsonSchema): string | undefined {
  const low =
    schema.exclusiveMinimum !== undefined
      ? `> ${schema.exclusiveMinimum}`
      : schema.minimum !== undefined
        ? `≥ ${schema.minimum}`
        : undefined;
  const high =
    schema.exclusiveMaximum !== undefined
      ? `< ${schema.exclusiveMaximum}`
      : schema.maximum !== undefined
        ? `≤ ${schema.maximum}`
        : undefined;
  if (schema.minimum !== undefined && schema.maximum !== undefined)
    return `${schema.minimum}–${schema.maximum}`;
  return [low, high].filter(Boolean).join(', ') || undefined;
}

/** "a, b or c" (or "a, b and c"). */
function list(values: string[], conjunction = 'or'): string {
  return values.length < 2
    ? (values[0] ?? '')
    : `${values.slice(0, -1).join(', ')} ${conjunction} ${values.at(-1)}`;
}

/** What a value may be, in words: "integer, ≥ 1", "`soft` or `hard`", "map of string". */
export function describeType(given: JsonSchema, root: JsonSchema): string {
  const schema = resolve(given, root);
  if (schema.enum) return list(schema.enum.map((v) => code(yamlValue(v))));
  if (schema.const !== undefined) return code(yamlValue(schema.const));
  const types = Array.isArray(schema.type)
    ? schema.type
    : schema.type
      ? [schema.type]
      : schema.properties
        ? ['object']
        : [];
  const words = types.map((type) => {
    if (type === 'array')
      return `array of ${schema.items ? describeType(schema.items, root) : 'anything'}${schema.uniqueItems ? ', no duplicates' : ''}`;
    if (type !== 'object') return type;
    if (schema.properties) {
      // Only inside arrays: an object's own keys get rows of their own.
      const required = new Set(schema.required ?? []);
      const keys = Object.entries(schema.properties).map(
        ([key, sub]) => `${code(key)} (${describeType(sub, root)}${required.has(key) ? ', required' : ''})`,
      );
      return `object with ${list(keys, 'and')}`;
    }
    if (typeof schema.additionalProperties === 'object')
      return `map of ${describeType(schema.additionalProperties, root)}`;
    return 'object';
  });
  const constraints = [
    range(schema),
    schema.minLength === 1 ? 'not empty' : schema.minLength ? `at least ${schema.minLength} characters` : '',
    schema.maxLength !== undefined ? `at most ${schema.maxLength} characters` : '',
    schema.pattern !== undefined ? `matching ${code(schema.pattern)}` : '',
  ].filter(Boolean);
  return [list(words) || 'any', ...constraints].join(', ');
}

/**
 * What a `then` asks for, when all it asks is values that are not empty: each a path, or
 * "either `a` or `b`"; undefined when it asks for more than that.
 */
function nonEmptyRules(schema: JsonSchema, prefix: string): string[] | undefined {
  const rules: string[] = [];
  for (const keyword of Object.keys(schema))
    if (!['properties', 'anyOf', 'required', 'minLength'].includes(keyword)) return undefined;
  for (const [key, sub] of Object.entries(schema.properties ?? {})) {
    if ((sub.minLength ?? 0) >= 1) rules.push(code(prefix + key));
    const nested = nonEmptyRules({ ...sub, minLength: undefined }, `${prefix}${key}.`);
    if (nested === undefined) return undefined;
    rules.push(...nested);
  }
  if (schema.anyOf) {
    const each = schema.anyOf.map((alternative) => nonEmptyRules(alternative, prefix));
    if (each.some((rule) => rule === undefined || rule.length !== 1)) return undefined;
    rules.push(`either ${list(each.map((rule) => rule![0]!))}`);
  }
  return rules;
}

/** An object's if/then rule in words, e.g. "When `redis.enabled` is `false`: …". */
function describeCondition(schema: JsonSchema, path: string): string | undefined {
  if (!schema.if || !schema.then) return undefined;
  const when = Object.entries(schema.if.properties ?? {}).map(([key, sub]) =>
    sub.const !== undefined
      ? `${code(`${path}.${key}`)} is ${code(yamlValue(sub.const))}`
      : `${code(`${path}.${key}`)} matches ${code(JSON.stringify(sub))}`,
  );
  const rules = nonEmptyRules(schema.then, `${path}.`);
  const then = rules
    ? `${list(rules, 'and')} must not be empty`
    : `the values must also match ${code(JSON.stringify(schema.then))}`;
  return `When ${when.join(' and ') || code(JSON.stringify(schema.if))}: ${then}.`;
}

/** The comment above each key of values.yaml, by key path (the first key's is on its map). */
function valueComments(node: YamlNode | null, prefix: string, comments: Map<string, string>): void {
  if (!isMap(node)) return;
  node.items.forEach((pair, i) => {
    if (!isScalar(pair.key)) return;
    const path = `${prefix}${String(pair.key.value)}`;
    const value = pair.value as YamlNode | null;
    const text = [
      pair.key.commentBefore ?? (i === 0 ? node.commentBefore : undefined),
      isScalar(value) ? value.comment : undefined,
    ]
      .filter((comment): comment is string => Boolean(comment))
      .map((comment) =>
        comment
          .split('\n')
          .map((line) => line.trim())
          .join(' '),
      )
      .join(' ');
    if (text) comments.set(path, text);
    valueComments(value, `${path}.`, comments);
  });
}

/** Every key path of the chart's values, in the schema's order. */
export function helmValueRows(root: JsonSchema, valuesYaml: string): HelmValueRow[] {
  const document = parseDocument(valuesYaml);
  const values: unknown = document.toJS();
  const comments = new Map<string, string>();
  valueComments(document.contents, '', comments);
  const rows: HelmValueRow[] = [];
  const walk = (object: JsonSchema, prefix: string, at: unknown) => {
    const required = new Set(object.required ?? []);
    for (const [key, given] of Object.entries(object.properties ?? {})) {
      const schema = resolve(given, root);
      const path = `${prefix}${key}`;
      const value =
        at !== null && typeof at === 'object' && Object.hasOwn(at, key)
          ? (at as Record<string, unknown>)[key]
          : undefined;
      const parent = schema.properties !== undefined;
      const fallback = value !== undefined ? value : schema.default;
      rows.push({
        path,
        // An object whose keys have rows of their own is just that.
        type: `${parent ? 'object' : describeType(schema, root)}${required.has(key) ? ', required' : ''}`,
        default: parent || fallback === undefined ? '' : code(yamlValue(fallback)),
        description: [
          given.description ?? schema.description,
          comments.get(path),
          describeCondition(schema, path),
        ]
          .filter(Boolean)
          .join(' '),
      });
      if (parent) walk(schema, `${path}.`, value);
    }
  };
  walk(root, '', values);
  return rows;
}

export function renderHelmValuesReference(schema: JsonSchema, valuesYaml: string): string {
  const rows = helmValueRows(schema, valuesYaml);
  return [
    '# Helm values reference',
    '',
    `Generated from [\`${SCHEMA_FILE}\`](../../${SCHEMA_FILE}) and [\`${VALUES_FILE}\`](../../${VALUES_FILE})`,
    'by `npm run docs` (`scripts/gen-docs.ts`); do not edit it by hand. Types and rules come from the',
    "schema, defaults from `values.yaml` (or the schema's `default`), descriptions from the schema and",
    'the comments above each key in `values.yaml`. The chart refuses a value that breaks the schema,',
    "with the value's path. What the values are for: [Install vmop on your cluster with Helm](../installing.md).",
    '',
    ...table(
      ['key', 'type', 'default', 'description'],
      rows.map((row) => [code(row.path), cell(row.type), cell(row.default), cell(row.description)]),
    ),
    '',
  ].join('\n');
}

// ---- CLI -------------------------------------------------------------------------------------

function commandPath(command: Command): string {
  const names: string[] = [];
  for (let at: Command | null = command; at; at = at.parent) names.unshift(at.name());
  return names.join(' ');
}

/** GitHub's anchor for the heading of a command: `vmop vm start` is #vmop-vm-start. */
function anchor(heading: string): string {
  return heading
    .toLowerCase()
    .replace(/[^a-z0-9 -]/g, '')
    .replace(/ /g, '-');
}

function defaultOf(item: Option | Argument): string {
  if (item.defaultValueDescription !== undefined) return code(item.defaultValueDescription);
  if (item.defaultValue === undefined) return '';
  return code(typeof item.defaultValue === 'string' ? item.defaultValue : JSON.stringify(item.defaultValue));
}

function choicesOf(item: Option | Argument): string {
  return item.argChoices ? `; one of ${list(item.argChoices.map(code))}` : '';
}

/** The commands people use (not hidden ones, not commander's own `help`), depth first. */
function visibleCommands(command: Command, help: Help): Command[] {
  return help
    .visibleCommands(command)
    .filter((sub) => command.commands.includes(sub))
    .flatMap((sub) => [sub, ...visibleCommands(sub, help)]);
}

function optionsTable(command: Command, help: Help): string[] {
  const options = help.visibleOptions(command).filter((option) => command.options.includes(option));
  if (options.length === 0) return [];
  return [
    '',
    ...table(
      ['option', 'description', 'default', 'environment'],
      options.map((option) => [
        code(option.flags),
        cell(`${option.description}${choicesOf(option)}`),
        option.mandatory && option.defaultValue === undefined ? 'required' : defaultOf(option),
        option.envVar ? code(option.envVar) : '',
      ]),
    ),
  ];
}

function renderCommand(command: Command, help: Help): string[] {
  const name = commandPath(command);
  const lines = [
    `## ${code(name)}`,
    '',
    text(command.description()),
    '',
    '```',
    help.commandUsage(command),
    '```',
  ];
  if (command.registeredArguments.length > 0) {
    lines.push(
      '',
      ...table(
        ['argument', 'description', 'default'],
        command.registeredArguments.map((argument) => [
          code(
            `${argument.required ? '<' : '['}${argument.name()}${argument.variadic ? '...' : ''}${argument.required ? '>' : ']'}`,
          ),
          cell(`${argument.description}${choicesOf(argument)}`),
          defaultOf(argument),
        ]),
      ),
    );
  }
  const options = optionsTable(command, help);
  lines.push(...options);
  if (options.length > 0 && command.commands.length > 0)
    lines.push(
      '',
      `These options are for the subcommands of ${code(name)}, given before or after their name.`,
    );
  return [...lines, ''];
}

export function renderCliReference(program: Command): string {
  const help = program.createHelp();
  const commands = visibleCommands(program, help);
  const depth = (command: Command) => commandPath(command).split(' ').length - 2;
  return [
    '# CLI reference',
    '',
    "Generated from the CLI's commander definitions ([`src/cli/`](../../src/cli/)) by `npm run docs`",
    '(`scripts/gen-docs.ts`); do not edit it by hand. What the commands are for: [The CLI](../cli.md)',
    'and [Configuration](../configuration.md).',
    '',
    `${code(program.name())}: ${text(program.description())}`,
    ...optionsTable(program, help),
    '',
    ...commands.map(
      (command) =>
        `${'  '.repeat(depth(command))}- [${code(commandPath(command))}](#${anchor(commandPath(command))}): ${cell(command.description())}`,
    ),
    '',
    ...commands.flatMap((command) => renderCommand(command, help)),
  ]
    .join('\n')
    .replace(/\n+$/, '\n');
}

// ---- Both ------------------------------------------------------------------------------------

/** The generated files and what they should hold, from the sources in this checkout. */
export async function generatedReferences(): Promise<Array<{ file: string; content: string }>> {
  const read = (file: string) => readFileSync(join(ROOT, file), 'utf8');
  return [
    {
      file: HELM_VALUES_REFERENCE,
      content: renderHelmValuesReference(JSON.parse(read(SCHEMA_FILE)) as JsonSchema, read(VALUES_FILE)),
    },
    { file: CLI_REFERENCE, content: renderCliReference(await buildProgram()) },
  ];
}

/** Run as `npm run docs`, not imported (by the unit test). */
function isEntryPoint(): boolean {
  try {
    return realpathSync(process.argv[1] ?? '') === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

if (isEntryPoint()) {
  for (const { file, content } of await generatedReferences()) {
    mkdirSync(dirname(join(ROOT, file)), { recursive: true });
    writeFileSync(join(ROOT, file), content);
    console.log(`wrote ${file}`);
  }
}
