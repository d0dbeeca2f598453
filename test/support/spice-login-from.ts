// A SPICE login as a viewer in another network namespace makes it (a node's, a pod's): the
// spice-login-cli.ts client run there under nsenter. SPICE_LINK_OK, or the server's refusal.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

export async function spiceLoginFrom(
  netns: string,
  host: string,
  port: number,
  password: string,
): Promise<number> {
  const { stdout } = await run('nsenter', [
    `--net=${netns}`,
    '--',
    process.execPath,
    ...['--import', 'tsx', 'test/support/spice-login-cli.ts', host, String(port), password],
  ]);
  return (JSON.parse(stdout) as { result: number }).result;
}
