import { randomUUID } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * The machine uuid: configured, else the one stored in the data directory, else a new one that is
 * stored there (guests and licenses may depend on it staying the same).
 */
export async function machineUuid(configured: string | undefined, dataDir: string): Promise<string> {
  if (configured) return configured;
  const file = path.join(dataDir, 'uuid.txt');
  const stored = (await readFile(file, 'utf8').catch(() => '')).trim();
  if (stored) return stored;
  const uuid = randomUUID();
  await writeFile(file, `${uuid}\n`);
  return uuid;
}
