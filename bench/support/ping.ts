// A 10 ms ping (iputils, as root) from a node's network namespace: the longest time between two
// replies while it ran, the network's own gap (TCP adds its retransmission timer on top).
import { spawn } from 'node:child_process';

export interface Ping {
  /** Stops it; the longest gap between replies (ms) and the requests not answered. */
  stop(): Promise<{ longestGapMs: number; lost: number }>;
}

export function startPing(netnsPath: string, address: string): Ping {
  const child = spawn('nsenter', [`--net=${netnsPath}`, '--', 'ping', '-D', '-n', '-i', '0.01', address], {
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const ended = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    async stop() {
      child.kill('SIGINT');
      await ended;
      // "[1795897540.123456] 64 bytes from 10.66.10.5: icmp_seq=12 ttl=63 time=0.9 ms"
      const replies = [...output.matchAll(/^\[(\d+\.\d+)\] \d+ bytes from .*icmp_seq=(\d+)/gm)];
      const times = replies.map((match) => Number(match[1]) * 1000);
      const longestGapMs = Math.round(
        times.slice(1).reduce((longest, time, i) => Math.max(longest, time - times[i]!), 0),
      );
      const sent = Number(/(\d+) packets transmitted/.exec(output)?.[1] ?? 0);
      return { longestGapMs, lost: Math.max(0, sent - replies.length) };
    },
  };
}
