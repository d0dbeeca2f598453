// The New VM form: for a person RBAC lets create VMs in some namespace. What most VMs need (CPUs,
// RAM, firmware, one system disk filled from an image of the namespace or a URL, a NIC on the pod
// network); the rest is the VM's YAML on its page afterwards. A refusal (the server's checks, then
// the apiserver's) shows at the field it concerns.
import { h } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import htm from 'htm';
import { api } from './client.js';
import { Field } from './form-field.js';

const html = htm.bind(h);

const FIRST = {
  name: '',
  cpus: 1,
  ram: '1Gi',
  firmware: 'uefi',
  diskSize: '10Gi',
  source: 'url',
  image: '',
  url: '',
  start: true,
};

/** The form's state as the API takes it. */
function formBody(form, namespace) {
  const source =
    form.source === 'image'
      ? { kind: 'image', image: form.image }
      : form.source === 'url'
        ? { kind: 'url', url: form.url }
        : { kind: 'empty' };
  const { name, ram, firmware, diskSize, start } = form;
  return { namespace, name, cpus: Number(form.cpus), ram, firmware, diskSize, source, start };
}

export function NewVmPage() {
  const [offer, setOffer] = useState(undefined);
  const [namespace, setNamespace] = useState('');
  const [form, setForm] = useState(FIRST);
  const [errors, setErrors] = useState({});
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    api('GET', '/api/vm-form').then(
      (answer) => {
        setOffer(answer);
        setNamespace(answer.namespaces[0]?.name ?? '');
      },
      (err) => setErrors({ form: err.message }),
    );
  }, []);
  if (!offer)
    return html`<main>
      <p class="loading">Loading…</p>
      ${errors.form && html`<p class="error">${errors.form}</p>`}
    </main>`;
  if (offer.namespaces.length === 0)
    return html`<main>
      <h2>New VM</h2>
      <p>You may not create VMs in any namespace.</p>
    </main>`;
  const images = offer.namespaces.find((ns) => ns.name === namespace)?.images ?? [];
  const set = (field) => (e) =>
    setForm({ ...form, [field]: e.target.type === 'checkbox' ? e.target.checked : e.target.value });
  /** An input's accessibility ties to its error. */
  const invalid = (field) => ({
    'aria-invalid': errors[field] ? 'true' : undefined,
    'aria-describedby': errors[field] ? `${field}-error` : undefined,
  });
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setErrors({});
    try {
      const made = await api('POST', '/api/vms', formBody(form, namespace));
      location.href = `/vm/${encodeURIComponent(made.namespace)}/${encodeURIComponent(made.name)}`;
    } catch (err) {
      setErrors(Object.keys(err.fields ?? {}).length > 0 ? err.fields : { form: err.message });
      setBusy(false);
    }
  };
  return html`<main>
    <h2>New VM</h2>
    <form class="new-vm" data-new-vm onSubmit=${submit} novalidate>
      <${Field} id="namespace" label="Namespace" error=${errors.namespace}>
        <select
          id="namespace"
          value=${namespace}
          onChange=${(e) => setNamespace(e.target.value)}
          ...${invalid('namespace')}
        >
          ${offer.namespaces.map((ns) => html`<option value=${ns.name}>${ns.name}</option>`)}
        </select>
      <//>
      <${Field} id="name" label="Name" error=${errors.name}>
        <input
          id="name"
          value=${form.name}
          onInput=${set('name')}
          autocomplete="off"
          required
          ...${invalid('name')}
        />
      <//>
      <${Field} id="cpus" label="CPUs" error=${errors.cpus}>
        <input
          id="cpus"
          type="number"
          min="1"
          max="64"
          value=${form.cpus}
          onInput=${set('cpus')}
          ...${invalid('cpus')}
        />
      <//>
      <${Field} id="ram" label="RAM (e.g. 512Mi, 4Gi)" error=${errors.ram}>
        <input id="ram" value=${form.ram} onInput=${set('ram')} ...${invalid('ram')} />
      <//>
      <${Field} id="firmware" label="Firmware" error=${errors.firmware}>
        <select id="firmware" value=${form.firmware} onChange=${set('firmware')} ...${invalid('firmware')}>
          <option value="uefi">UEFI</option>
          <option value="bios">BIOS</option>
        </select>
      <//>
      <${Field} id="diskSize" label="System disk size (e.g. 20Gi)" error=${errors.diskSize}>
        <input id="diskSize" value=${form.diskSize} onInput=${set('diskSize')} ...${invalid('diskSize')} />
      <//>
      <${Field} id="source" label="System disk filled from" error=${errors.source}>
        <select id="source" value=${form.source} onChange=${set('source')} ...${invalid('source')}>
          <option value="url">a URL (qcow2, raw, or either compressed)</option>
          <option value="image" disabled=${images.length === 0}>an image of the namespace</option>
          <option value="empty">nothing (an empty disk)</option>
        </select>
        ${
          form.source === 'url' &&
          html`<input
            id="url"
            aria-label="URL of the disk image"
            type="url"
            placeholder="https://…"
            value=${form.url}
            onInput=${set('url')}
            ...${invalid('source')}
          />`
        }
        ${
          form.source === 'image' &&
          html`<select
            id="image"
            aria-label="Image"
            value=${form.image}
            onChange=${set('image')}
            ...${invalid('source')}
          >
            <option value="">Choose an image</option>
            ${images.map((image) => html`<option value=${image}>${image}</option>`)}
          </select>`
        }
      <//>
      <div class="field">
        <label
          ><input id="start" type="checkbox" checked=${form.start} onChange=${set('start')} /> Start it
          now</label
        >
      </div>
      ${errors.form && html`<p class="error" data-error-for="form" role="alert">${errors.form}</p>`}
      <div class="actions">
        <button type="submit" data-action="create" disabled=${busy}>Create</button>
        <a href="/">Cancel</a>
      </div>
    </form>
  </main>`;
}
