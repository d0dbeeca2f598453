import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { freePort, waitForPort } from '../util/free-port.js';
import { childRef, describeExit, type ProcessRef } from '../util/process.js';
import type { ProcessGroup } from './process-group.js';

export interface RedisServer {
  url: string;
  port: number;
  ref: ProcessRef;
  /** Resolves with how the server ended. */
  exited: Promise<string>;
  hasExited(): boolean;
  /** Sends `signal` unless it has exited (the handle of its parent: never another process). */
  kill(signal: NodeJS.Signals): void;
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
  /** The process group it runs in, stopped as one should the owner die. */
  group?: ProcessGroup;
}

/**
 * The settings vmop's Redis runs with, as the chart's (helm/vmop/templates/redis.yaml): no value
 * vmop writes comes near 1 MB, so a tenant's credential cannot write a larger one; Redis refuses
 * writes at its memory bound rather than be killed at its pod's limit, never evicting the queue;
 * and it tells the managers of snapshot writes (queue/snapshot-writes.ts).
 */
export const REDIS_SETTINGS = [
  '--notify-keyspace-events',
  'K$',
  '--proto-max-bulk-len',
  '1mb',
  '--maxmemory',
  '256mb',
  '--maxmemory-policy',
  'noeviction',
];

/**
 * Starts a private redis-server on a free port (of loopback, by default) with persistence off,
 * so tests never share (or depend on) a Redis that happens to run on 6379.
 */
export async function startRedis(options: StartRedisOptions = {}): Promise<RedisServer> {
  const host = options.host ?? '127.0.0.1';
  const port = options.port ?? (await freePort(host));
  const args = [
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
  ];
  const binary = options.binary ?? 'redis-server';
  const command = options.group ? options.group.command(binary, args) : { binary, args };
  const child = spawn(command.binary, command.args, { stdio: ['ignore', 'ignore', 'pipe'] });
  const ref = child.pid === undefined ? undefined : childRef(child.pid);
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
    ref: ref!,
    hasExited: () => hasExited(child),
    kill: (signal) => {
      if (!hasExited(child)) child.kill(signal);
    },
    exited: exited.then(([code, signal]) =>
      describeExit({ code: code as number | null, signal: signal as NodeJS.Signals | null }),
    ),
    stop: (graceMs?: number) => stopChild(child, graceMs),
  };
}

const hasExited = (child: ChildProcess) => child.exitCode !== null || child.signalCode !== null;

async function stopChild(child: ChildProcess, graceMs = 5_000): Promise<void> {
  if (hasExited(child)) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}
