import { Liquid } from 'liquidjs';
import { parse as parseYaml } from 'yaml';
import { formatFieldPath } from '../../api/runner-config.js';
import { ProcessDefinitions } from './process-definitions.js';
import type { TemplateContext } from './context.js';

/*
 * Templates render YAML. Every `{{ }}` output is escaped as the inside of a double-quoted YAML string,
 * so a value (quotes, newlines, anything) can never end its string and add list items: interpolate
 * only inside "...". The `opt` filter also doubles commas, qemu's escape inside option lists
 * ("guest={{ vm.name | opt }},debug-threads=on").
 */
const engine = new Liquid({
  strictFilters: true,
  outputEscape: (value: unknown) => JSON.stringify(String(value)).slice(1, -1),
});
engine.registerFilter('opt', (value: unknown) => String(value).replace(/,/g, ',,'));

export class TemplateError extends Error {}

export async function renderProcessDefinitions(
  templateText: string,
  context: TemplateContext,
  templateName: string,
): Promise<ProcessDefinitions> {
  let text: string;
  try {
    text = await engine.parseAndRender(templateText, context);
  } catch (err) {
    throw new TemplateError(`template ${templateName}: ${(err as Error).message}`);
  }
  let document: unknown;
  try {
    document = parseYaml(text);
  } catch (err) {
    throw new TemplateError(`template ${templateName} did not render valid YAML: ${(err as Error).message}`);
  }
  const result = ProcessDefinitions.safeParse(document);
  if (!result.success) {
    const problems = result.error.issues.map((issue) => `${formatFieldPath(issue.path)}: ${issue.message}`);
    throw new TemplateError(
      `template ${templateName} rendered invalid process definitions: ${problems.join('; ')}`,
    );
  }
  return result.data;
}
