import type { z } from 'zod';

/** Each problem of a CLI's parsed flags as `--flag-name: message` (zod's paths are camelCase). */
export const flagErrors = (error: z.ZodError): string[] =>
  error.issues.map(
    (issue) => `--${issue.path.join('.').replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}: ${issue.message}`,
  );
