// What a person may do with a VM, as buttons and fields: on the cards, the admin table and the VM's page.
import { h } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import htm from 'htm';
import { api } from './client.js';

const html = htm.bind(h);

function ActionButton({ vm, action, label, onError }) {
  const [busy, setBusy] = useState(false);
  const run = async () => {
    setBusy(true);
    try {
      await api('POST', `/api/vms/${vm.namespace}/${vm.name}/${action}`);
    } catch (err) {
      onError(err.message);
    } finally {
      setBusy(false);
    }
  };
  return html`<button type="button" data-action=${action} disabled=${busy} onClick=${run}>${label}</button>`;
}

/**
 * The buttons the person may use: nothing else is shown. Cards leave out the rarer ones (restart,
 * migrate); the table and the VM's page show `every` one.
 */
export function VmActions({ vm, onError, every }) {
  const may = new Set(vm.may);
  const running = vm.state === 'Running';
  const buttons = [
    !running && may.has('start') && ['start', 'Start'],
    running && may.has('stop') && ['stop', 'Stop'],
    every && running && may.has('restart') && ['restart', 'Restart'],
    running && may.has('reset') && ['reset', 'Reset'],
    every && running && may.has('migrate') && ['migrate', 'Migrate'],
  ].filter(Boolean);
  return html`<div class="actions">
    ${buttons.map(([action, label]) => html`<${ActionButton} key=${action} vm=${vm} action=${action} label=${label} onError=${onError} />`)}
    ${running && may.has('accessConsole') && html`<a class="button" href=${`/console/${vm.namespace}/${vm.name}`}>Console</a>`}
  </div>`;
}

/** Deletes the VM once the person confirms, then goes to their VMs. */
export function DeleteButton({ vm, onError }) {
  const [busy, setBusy] = useState(false);
  const remove = async () => {
    if (!confirm(`Delete VM ${vm.name} in ${vm.namespace}? Its pod goes now; its disks' claims are kept.`))
      return;
    setBusy(true);
    try {
      await api('DELETE', `/api/vms/${encodeURIComponent(vm.namespace)}/${encodeURIComponent(vm.name)}`);
      location.assign('/');
    } catch (err) {
      onError(err.message);
      setBusy(false);
    }
  };
  return html`<button type="button" class="danger" data-action="delete" disabled=${busy} onClick=${remove}>
    Delete
  </button>`;
}

/** A field that changes the VM's CPUs or RAM now (Enter sends it). */
export function ResourceInput({ vm, field, onError }) {
  const current =
    field === 'currentCpus' ? (vm.currentCpus ?? vm.maximumCpus) : (vm.currentRam ?? vm.maximumRam);
  const [value, setValue] = useState(String(current));
  useEffect(() => setValue(String(current)), [current]);
  const submit = async (e) => {
    e.preventDefault();
    try {
      await api('PATCH', `/api/vms/${vm.namespace}/${vm.name}/resources`, {
        [field]: field === 'currentCpus' ? Number(value) : value,
      });
    } catch (err) {
      onError(err.message);
      setValue(String(current));
    }
  };
  const label = field === 'currentCpus' ? `CPUs of ${vm.name}` : `RAM of ${vm.name}`;
  return html`<form class="inline" onSubmit=${submit}>
    <input
      aria-label=${label}
      name=${field}
      value=${value}
      size="5"
      onInput=${(e) => setValue(e.target.value)}
    />
  </form>`;
}
