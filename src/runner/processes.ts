// What a runner starts: the VM type's template rendered into qemu's (and swtpm's) argv, with
// their executables found on the search path.
import { statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import type { RunnerSettings } from '../api/runner-config.js';
import type { Logger } from '../util/logger.js';
import { checkCdImages } from './drives.js';
import { requireExecutable } from './executable.js';
import { prepareFirmware } from './firmware.js';
import type { RunnerPaths } from './paths.js';
import { templateContext } from './template/context.js';
import { templateForVm, templateSearchPath } from './template/locate.js';
import { executableCandidates, flattenArguments } from './template/process-definitions.js';
import { renderProcessDefinitions } from './template/render.js';
import { machineUuid } from './uuid.js';

/** A process to start: the executable found and its argv. */
export interface ProcessLaunch {
  executable: string;
  args: string[];
  environment: Record<string, string>;
}

const isRegularFile = (file: string) => {
  try {
    return statSync(file).isFile();
  } catch {
    return false;
  }
};

/** Renders the VM type's template into the processes to start, with their executables found. */
export async function renderProcesses(
  settings: RunnerSettings,
  options: { paths: RunnerPaths; env: NodeJS.ProcessEnv; hasDisplayPassword: boolean; logger: Logger },
): Promise<{ qemu: ProcessLaunch; swtpm?: ProcessLaunch }> {
  const { vm } = settings;
  const { paths, env } = options;
  const searchPath = env.PATH;
  checkCdImages(vm, paths.imageRepository);
  const templateFile = await templateForVm(settings.template, {
    searchPath: templateSearchPath(env),
    dataDir: paths.dataDir,
    update: settings.updateTemplate,
  });
  const context = templateContext({
    settings,
    paths,
    uuid: await machineUuid(vm.uuid, paths.dataDir),
    firmware: await prepareFirmware(vm.firmware, paths.dataDir),
    hasDisplayPassword: options.hasDisplayPassword,
    isRegularFile,
  });
  const processes = await renderProcessDefinitions(
    await readFile(templateFile, 'utf8'),
    context,
    templateFile,
  );
  options.logger.info({ template: templateFile }, 'template rendered');
  if (vm.useTpm && !processes.swtpm) throw new Error(`useTpm is set, but ${templateFile} defines no swtpm`);
  const swtpm = vm.useTpm ? processes.swtpm : undefined;
  return {
    qemu: {
      executable: requireExecutable('qemu', executableCandidates(processes.qemu), searchPath),
      args: flattenArguments(processes.qemu.arguments),
      environment: processes.qemu.environment,
    },
    swtpm: swtpm && {
      executable: requireExecutable('swtpm', executableCandidates(swtpm), searchPath),
      args: flattenArguments(swtpm.arguments),
      environment: swtpm.environment,
    },
  };
}
