// Where a VM's consoles are reached: its runner pod, and what runs there for the serial console.
import type { VirtualMachine } from '../api/virtual-machine.js';

/** The VM's runner pod, as its status names it (the VM's own name when it names none). */
export const runnerPodOf = (vm: VirtualMachine) => vm.status?.runnerPod?.name ?? vm.metadata.name;

/**
 * The serial console relay in the runner container (the image's CLI; serial-relay.ts), run without
 * a TTY so that its client's end reaches it, and taking the console only when its client says go.
 */
export const SERIAL_RELAY_COMMAND = ['node', '/opt/vmop/dist/cli/main.js', 'serial-console', '--ask-first'];
