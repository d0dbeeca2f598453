// Which runner images a VM may name in spec.image. The runner pod is where the VM's QEMU runs with
// the VM's devices and credentials: who may create a VM must not choose what runs there, beyond
// the default runner image and the images an admin allows (the chart's runner.allowedImages).
import type { VirtualMachine } from '../../../api/virtual-machine.js';
import { runnerImage, type RunnerImage } from './pod.js';

/** `image` is the default, or named by the allow-list: exactly, or by a prefix ending in `*`. */
export function runnerImageAllowed(image: string, defaultImage: string, allowed: readonly string[]): boolean {
  return (
    image === defaultImage ||
    allowed.some((entry) => (entry.endsWith('*') ? image.startsWith(entry.slice(0, -1)) : image === entry))
  );
}

/** The spec error of a VM naming a runner image it may not (none without spec.image). */
export function runnerImageErrors(
  vm: VirtualMachine,
  defaultImage: RunnerImage,
  allowed: readonly string[],
): string[] {
  if (!vm.spec.image) return [];
  const { image } = runnerImage(vm, defaultImage);
  if (runnerImageAllowed(image, defaultImage.image, allowed)) return [];
  return [
    `spec.image: ${image} is not a runner image this cluster allows (the default is ${defaultImage.image}; an admin may allow others with the chart's runner.allowedImages); remove spec.image to use the default`,
  ];
}
