import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { freePort, waitForPort } from '../util/free-port.js';
import { describeExit } from '../util/process.js';

export interface RedisServer {
  url: string;
  port: number;
  pid: number;
  /** Resolves with how the server ended. */
  exited: Promise<string>;
  /** Stops the server (SIGTERM, then SIGKILL after graceMs, default 5 s) and waits for it to exit. */
  stop(graceMs?: number): Promise<void>;
}

export interface StartRedisOptions {
  /** Reuse a port, e.g. to simulate a Redis restart on the same address. */
  port?: number;
  /** Where it listens; default 127.0.0.1 (a local node's pods need the node network's host address). */
  host?: string;
  /** More redis-server arguments, e.g. ['--aclfile', file]. */
  extraArgs?: string[];
  /** A config file, read before the arguments (a Sentinel needs one it can rewrite). */
  configFile?: string;
  binary?: string;
}

/**
 * Starts a private redis-server on a free port (of loopback, by default) with persistence off,
 * so tests never share (or depend on) a Redis that happens to run on 6379.
 */
export async function startRedis(options: StartRedisOptions = {}): Promise<RedisServer> {
  const host = options.host ?? '127.0.0.1';
  const port = options.port ?? (await freePort(host));
  const child = spawn(
    options.binary ?? 'redis-server',
    [
      ...(options.configFile ? [options.configFile] : []),
      '--port',
      String(port),
      '--bind',
      host,
      // No password on a private address; keep the protected mode from refusing the node's pods.
      '--protected-mode',
      'no',
      '--save',
      '',
      '--appendonly',
      'no',
      '--daemonize',
      'no',
      '--loglevel',
      'warning',
      ...(options.extraArgs ?? []),
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = once(child, 'exit');
  const spawnError = once(child, 'error').then(([err]) => {
    throw new Error(`redis-server could not start: ${(err as Error).message}`);
  });
  await Promise.race([
    waitForPort(port, host),
    spawnError,
    exited.then(([code]) => {
      throw new Error(`redis-server exited with code ${code} before listening: ${stderr.trim()}`);
    }),
  ]);
  return {
    url: `redis://${host}:${port}`,
    port,
    pid: child.pid!,
    exited: exited.then(([code, signal]) =>
      describeExit({ code: code as number | null, signal: signal as NodeJS.Signals | null }),
    ),
    stop: (graceMs?: number) => stopChild(child, graceMs),
  };
}

async function stopChild(child: ChildProcess, graceMs = 5_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}
