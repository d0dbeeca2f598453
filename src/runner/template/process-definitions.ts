import { z } from 'zod';

type NestedArgument = string | number | NestedArgument[];

/** Arguments may be nested lists for readability (as upstream's templates do); they are flattened. */
const NestedArgument: z.ZodType<NestedArgument> = z.lazy(() =>
  z.union([z.string(), z.number(), z.array(NestedArgument)]),
);

export const ProcessDefinition = z.object({
  /** Candidate executables: absolute paths or names looked up in PATH; the first found is used. */
  executable: z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]),
  arguments: z.array(NestedArgument).default([]),
  /** Variables set for the process, on top of the runner's own environment. */
  environment: z.record(z.string(), z.union([z.string(), z.number()]).transform(String)).default({}),
});

/** What a template renders: the processes the runner starts, as argv arrays. */
export const ProcessDefinitions = z.object({
  swtpm: ProcessDefinition.optional(),
  qemu: ProcessDefinition,
});

export type ProcessDefinition = z.infer<typeof ProcessDefinition>;
export type ProcessDefinitions = z.infer<typeof ProcessDefinitions>;

export function executableCandidates(definition: ProcessDefinition): string[] {
  return typeof definition.executable === 'string' ? [definition.executable] : definition.executable;
}

export function flattenArguments(args: NestedArgument[]): string[] {
  return args.flatMap((arg) => (Array.isArray(arg) ? flattenArguments(arg) : [String(arg)]));
}
