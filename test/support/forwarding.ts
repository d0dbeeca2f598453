import { spawn } from 'node:child_process';

/**
 * Runs a command that forwards a local port (`kubectl port-forward`, `vmop vm port-forward`,
 * `vmop vm vnc`); `port` resolves with the local port it says it forwards from.
 */
export function startForwarding(command: string, args: string[], env: NodeJS.ProcessEnv) {
  const child = spawn(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let said = '';
  const port = new Promise<number>((resolve, reject) => {
    const read = (chunk: Buffer) => {
      said += String(chunk);
      const match = /Forwarding from 127\.0\.0\.1:(\d+)/.exec(said);
      if (match) resolve(Number(match[1]));
    };
    child.stdout.on('data', read);
    child.stderr.on('data', read);
    child.on('exit', (code) => reject(new Error(`${command} ended (${code}): ${said}`)));
  });
  return { port, said: () => said, stop: () => child.kill() };
}
