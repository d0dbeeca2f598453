import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { z } from 'zod';
import type { Logger } from '../util/logger.js';

/**
 * Runs one of the checkout's build scripts (a quick no-op when its cache is warm) and parses the
 * `KEY=value` lines it prints on stdout with `schema`. Its own `[name]` progress lines on stderr are
 * logged at info level, tool chatter at debug; the tail goes into the error when it fails.
 */
export async function runBuildScript<T extends z.ZodType>(
  script: string,
  schema: T,
  logger: Logger,
): Promise<z.infer<T>> {
  const file = path.join(repositoryRoot(), 'scripts', script);
  const child = spawn('bash', [file], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  const stderrTail: string[] = [];
  createInterface({ input: child.stderr }).on('line', (line) => {
    if (line.startsWith('[')) logger.info(line);
    else logger.debug(line);
    stderrTail.push(line);
    if (stderrTail.length > 30) stderrTail.shift();
  });
  const [code] = (await once(child, 'close')) as [number | null];
  if (code !== 0)
    throw new Error(`scripts/${script} failed with exit code ${code}:\n${stderrTail.join('\n')}`);
  const assignments = Object.fromEntries(
    stdout
      .split('\n')
      .map((line) => line.match(/^([A-Z0-9_]+)=(.*)$/))
      .filter((match) => match !== null)
      .map((match) => [match[1], match[2]]),
  );
  return schema.parse(assignments);
}

/** The checkout this module lives in (from source, or from compiled output below dist/). */
export function repositoryRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!existsSync(path.join(dir, 'scripts', 'build-kubernetes.sh'))) {
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error(`no vmop checkout above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
  return dir;
}
