import { z } from 'zod';
import { createLogger, type Logger } from '../util/logger.js';
import { runBuildScript } from './build-script.js';

/** An image built locally: its reference and the docker-archive tar a node imports. */
export interface LocalImage {
  ref: string;
  archive: string;
}

export interface LocalImages {
  manager: LocalImage;
  runner: LocalImage;
  redis: LocalImage;
  pause: LocalImage;
  coredns: LocalImage;
}

const image = (name: string) => ({
  [`${name}_IMAGE`]: z.string().min(1),
  [`${name}_ARCHIVE`]: z.string().min(1),
});
const BuildScriptOutput = z.object({
  ...image('MANAGER'),
  ...image('RUNNER'),
  ...image('REDIS'),
  ...image('PAUSE'),
  ...image('COREDNS'),
});

let building: Promise<LocalImages> | undefined;

/**
 * The images a local cluster runs, from scripts/build-images.sh (which builds what its cache lacks:
 * vmop's from the Dockerfile, stand-ins for public images from Debian's packages). One build per process.
 */
export function ensureLocalImages(logger: Logger = createLogger('images')): Promise<LocalImages> {
  building ??= runBuildScript('build-images.sh', BuildScriptOutput, logger).then(
    (out) => {
      const pick = (name: string): LocalImage => ({
        ref: out[`${name}_IMAGE`] as string,
        archive: out[`${name}_ARCHIVE`] as string,
      });
      return {
        manager: pick('MANAGER'),
        runner: pick('RUNNER'),
        redis: pick('REDIS'),
        pause: pick('PAUSE'),
        coredns: pick('COREDNS'),
      };
    },
    (err: unknown) => {
      building = undefined;
      throw err;
    },
  );
  return building;
}
