import { accessSync, constants, statSync } from 'node:fs';
import path from 'node:path';

function isExecutableFile(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return statSync(file).isFile();
  } catch {
    return false;
  }
}

/** The first candidate that is an executable file; names without a slash are looked up in PATH. */
export function findExecutable(candidates: string[], searchPath: string | undefined): string | undefined {
  const dirs = (searchPath ?? '').split(path.delimiter).filter(Boolean);
  for (const candidate of candidates) {
    const files = candidate.includes('/') ? [candidate] : dirs.map((dir) => path.join(dir, candidate));
    const found = files.find(isExecutableFile);
    if (found) return found;
  }
  return undefined;
}

/** Like findExecutable, but a missing program is an error that says what was tried. */
export function requireExecutable(
  what: string,
  candidates: string[],
  searchPath: string | undefined,
): string {
  const found = findExecutable(candidates, searchPath);
  if (!found) {
    throw new Error(
      `${what} executable not found: tried ${candidates.join(', ')} (PATH=${searchPath ?? ''}); is it installed?`,
    );
  }
  return found;
}
