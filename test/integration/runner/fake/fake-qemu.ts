/*
 * A fake qemu for the runner tests: a QMP peer on the monitor socket that sends a garbage line
 * after its greeting and after every reply, which real qemu never does. It answers the commands
 * the runner uses at start and "powers off" on system_powerdown.
 */
import net from 'node:net';

const [socketPath] = process.argv.slice(2);
if (!socketPath) throw new Error('usage: fake-qemu <monitor socket>');
// Shows what the template's `environment` gave this process.
if (process.env.FAKE_QEMU_MARK) console.error(`FAKE_QEMU_MARK=${process.env.FAKE_QEMU_MARK}`);

const CPU = { 'qom-path': '/machine/unattached/device[0]' };
const replies: Record<string, unknown> = {
  'query-hotpluggable-cpus': [{ type: 'fake-cpu', 'vcpus-count': 1, props: { 'socket-id': 0 }, ...CPU }],
  'query-cpus-fast': [{ 'cpu-index': 0, ...CPU }],
  'query-balloon': { actual: 256 * 1024 * 1024 },
};
const GARBAGE = 'this is not JSON {\n';

const server = net.createServer((socket) => {
  socket.write(
    `${JSON.stringify({ QMP: { version: { qemu: { major: 7, minor: 2, micro: 0 }, package: 'fake' }, capabilities: [] } })}\n`,
  );
  socket.write(GARBAGE);
  let buffer = '';
  socket.setEncoding('utf8').on('data', (chunk: string) => {
    buffer += chunk;
    let newline: number;
    while ((newline = buffer.indexOf('\n')) >= 0) {
      const request = JSON.parse(buffer.slice(0, newline)) as { execute: string; id?: number };
      buffer = buffer.slice(newline + 1);
      socket.write(`${JSON.stringify({ return: replies[request.execute] ?? {}, id: request.id })}\n`);
      socket.write(GARBAGE);
      if (request.execute === 'system_powerdown') {
        const timestamp = { seconds: Math.floor(Date.now() / 1000), microseconds: 0 };
        socket.write(
          `${JSON.stringify({ event: 'SHUTDOWN', data: { guest: true, reason: 'guest-shutdown' }, timestamp })}\n`,
        );
        socket.end(() => process.exit(0));
      }
    }
  });
});
server.listen(socketPath);
process.on('SIGTERM', () => process.exit(0));
