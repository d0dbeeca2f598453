// Preloaded into a process under test or benchmark (node --import): appends "<epoch ms> <METHOD> <path>" for
// every HTTP request it starts to $VMOP_REQUEST_LOG/<pid>.log, so a test or benchmark can
// tell the process's own apiserver requests from everyone else's (apiserver_request_total has no client).
import { subscribe } from 'node:diagnostics_channel';
import { appendFileSync } from 'node:fs';
import path from 'node:path';
import process from 'node:process';

const dir = process.env.VMOP_REQUEST_LOG;
if (dir) {
  const file = path.join(dir, `${process.pid}.log`);
  subscribe('http.client.request.start', ({ request }) => {
    appendFileSync(file, `${Date.now()} ${request.method} ${request.path.split('?')[0]}\n`);
  });
}
