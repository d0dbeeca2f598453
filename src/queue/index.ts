export { TerminalError } from './terminal-error.js';
export type { HandlerResult, KeyHandler } from './handler.js';
export { openWorkQueue, type WorkQueue } from './producer.js';
export { startWorkers, type StartWorkersOptions } from './workers.js';
export { DEFAULT_QUEUE_NAME, WorkKeySchema } from './keys.js';
