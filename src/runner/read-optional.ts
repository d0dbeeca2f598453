import { readFile } from 'node:fs/promises';

/** A file's text, or undefined when it cannot be read (not there yet, or gone). */
export const readOptional = (file: string) => readFile(file, 'utf8').catch(() => undefined);
