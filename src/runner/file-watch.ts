import { watch, type FSWatcher } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../util/logger.js';

export interface FileWatch {
  close(): void;
}

/**
 * Calls onChange(file, text) when the content of one of `files` changes (text undefined: the file is
 * gone). It watches the directories, not the files: kubelet updates a ConfigMap or Secret volume by
 * swapping the `..data` symlink, which a watch on the old file would never see. Events are
 * debounced and the content is compared, so only real changes are reported. `known` holds the
 * contents the caller already has; a check runs at once so changes made before the watch began count.
 */
export function watchFiles(
  files: string[],
  known: Map<string, string | undefined>,
  onChange: (file: string, text: string | undefined) => void,
  options: { logger: Logger; debounceMs?: number },
): FileWatch {
  const last = new Map(known);
  let timer: NodeJS.Timeout | undefined;
  let checking = Promise.resolve();

  const check = async () => {
    for (const file of files) {
      const text = await readFile(file, 'utf8').catch(() => undefined);
      if (text !== last.get(file)) {
        last.set(file, text);
        onChange(file, text);
      }
    }
  };
  const schedule = () => {
    clearTimeout(timer);
    timer = setTimeout(() => (checking = checking.then(check)), options.debounceMs ?? 100);
  };

  const watchers: FSWatcher[] = [];
  for (const dir of new Set(files.map((file) => path.dirname(file)))) {
    try {
      watchers.push(
        watch(dir, schedule).on('error', (err) => options.logger.warn({ err, dir }, 'watch failed')),
      );
    } catch (err) {
      options.logger.info(
        { dir, reason: (err as Error).message },
        'not watching a directory that cannot be watched',
      );
    }
  }
  schedule();
  return {
    close() {
      clearTimeout(timer);
      for (const watcher of watchers) watcher.close();
    },
  };
}
