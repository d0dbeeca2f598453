// Where a VM's consoles are reached: its runner pod, and what runs there for the serial console.
import type { VirtualMachine } from '../api/virtual-machine.js';

/** The VM's runner pod, as its status names it (the VM's own name when it names none). */
export const runnerPodOf = (vm: VirtualMachine) => vm.status?.runnerPod?.name ?? vm.metadata.name;

/** The serial console relay in the runner container (the image's CLI; serial-relay.ts). */
export const SERIAL_RELAY_COMMAND = ['node', '/opt/vmop/dist/cli/main.js', 'serial-console'];

/**
 * The GUI's relay waits for this byte before it takes the console (serial-relay.ts): the GUI sends
 * it once its exec is up and the browser is still there, so a relay whose browser left meanwhile
 * ends without displacing anyone.
 */
export const SERIAL_RELAY_HELLO = '\u0000';
export const SERIAL_RELAY_AFTER_HELLO = [...SERIAL_RELAY_COMMAND, '--after-hello'];
