// A process's V8 heap after a full garbage collection, read through its inspector (the process
// runs with --inspect): the memory its live objects take, without the garbage a burst of work
// leaves until V8 next collects, which RSS includes.
import WebSocket from 'ws';

/** The inspector's WebSocket URL from a process's stderr line "Debugger listening on ws://…". */
export function inspectorUrl(stderrLine: string): string | undefined {
  return /Debugger listening on (ws:\/\/\S+)/.exec(stderrLine)?.[1];
}

/** Collects garbage in the inspected process, then returns its used heap in bytes. */
export async function heapAfterGc(url: string): Promise<number> {
  const socket = new WebSocket(url);
  await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
  let id = 0;
  const call = (method: string) =>
    new Promise<Record<string, unknown>>((resolve, reject) => {
      const callId = ++id;
      const onMessage = (data: WebSocket.RawData) => {
        const reply = JSON.parse(String(data)) as {
          id?: number;
          result?: Record<string, unknown>;
          error?: unknown;
        };
        if (reply.id !== callId) return;
        socket.off('message', onMessage);
        if (reply.error) reject(new Error(JSON.stringify(reply.error)));
        else resolve(reply.result ?? {});
      };
      socket.on('message', onMessage);
      socket.send(JSON.stringify({ id: callId, method }));
    });
  try {
    await call('HeapProfiler.collectGarbage');
    const { usedSize } = await call('Runtime.getHeapUsage');
    return Number(usedSize);
  } finally {
    socket.close();
  }
}
