// A VM's YAML on its page: read by anyone who sees the VM, edited by who may update it (RBAC). The
// apiserver checks an edit in a dry run (Check), and again when it is saved; its refusal shows at
// the editor, and the VM stays as it was.
import { h } from 'preact';
import { useState } from 'preact/hooks';
import htm from 'htm';
import { api } from './client.js';

const html = htm.bind(h);

export function VmYaml({ vm }) {
  const [text, setText] = useState(undefined);
  const [message, setMessage] = useState(undefined);
  const [busy, setBusy] = useState(false);
  const path = `/api/vms/${encodeURIComponent(vm.namespace)}/${encodeURIComponent(vm.name)}/yaml`;
  const editable = vm.may.includes('edit');
  const load = async () => {
    setMessage(undefined);
    try {
      setText((await api('GET', path)).yaml);
    } catch (err) {
      setMessage({ error: true, text: err.message });
    }
  };
  const send = (dryRun) => async () => {
    setBusy(true);
    try {
      const answer = await api('PUT', dryRun ? `${path}?dryRun=true` : path, { yaml: text });
      if (!dryRun) setText(answer.yaml);
      setMessage({ error: false, text: dryRun ? 'The apiserver accepts it.' : 'Saved.' });
    } catch (err) {
      setMessage({ error: true, text: err.message });
    } finally {
      setBusy(false);
    }
  };
  return html`<details data-yaml onToggle=${(e) => e.currentTarget.open && text === undefined && load()}>
    <summary><h3>YAML</h3></summary>
    ${
      text !== undefined &&
      html`<textarea
          class="yaml"
          spellcheck="false"
          rows="24"
          aria-label=${`YAML of ${vm.name}`}
          readonly=${!editable}
          value=${text}
          onInput=${(e) => setText(e.target.value)}
        ></textarea>
        <div class="actions">
          <button type="button" data-action="yaml-reload" disabled=${busy} onClick=${load}>Load again</button>
          ${
            editable &&
            html`<button type="button" data-action="yaml-check" disabled=${busy} onClick=${send(true)}>
                Check
              </button>
              <button type="button" data-action="yaml-save" disabled=${busy} onClick=${send(false)}>
                Save
              </button>`
          }
        </div>`
    }
    ${
      message &&
      html`<p
        class=${message.error ? 'error' : 'ok'}
        role=${message.error ? 'alert' : 'status'}
        data-yaml-message
      >
        ${message.text}
      </p>`
    }
  </details>`;
}
