// The images page (/images): the VirtualMachineImages of every namespace whose images the person
// may list, with their phase and their import's progress; looked at again every few seconds, more
// often while an import runs.
import { h } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import htm from 'htm';
import { api } from './client.js';
import { UploadForm } from './image-upload.js';

const html = htm.bind(h);
const IMPORTING_POLL_MS = 2000;
const IDLE_POLL_MS = 10_000;

function ImageRow({ image }) {
  return html`<tr data-image=${`${image.namespace}/${image.name}`}>
    <td>${image.name}</td>
    <td>${image.namespace}</td>
    <td>
      <span class=${`phase phase-${image.phase.toLowerCase()}`} data-image-phase>${image.phase}</span>
      ${image.progress && html` <span data-image-progress>${image.progress}</span>`}
    </td>
    <td data-image-size>${image.size}</td>
    <td class="source" data-image-source>${image.source}</td>
    <td data-image-message>${image.message ?? ''}</td>
  </tr>`;
}

export function ImagesPage() {
  const [listed, setListed] = useState(undefined);
  const [error, setError] = useState('');
  useEffect(() => {
    let gone = false;
    let timer;
    const load = async () => {
      try {
        const next = await api('GET', '/api/images');
        if (gone) return;
        setListed(next);
        setError('');
        const busy = next.images.some((image) => ['Pending', 'Importing'].includes(image.phase));
        timer = setTimeout(load, busy ? IMPORTING_POLL_MS : IDLE_POLL_MS);
      } catch (err) {
        if (gone) return;
        setError(err.message);
        timer = setTimeout(load, IDLE_POLL_MS);
      }
    };
    void load();
    return () => {
      gone = true;
      clearTimeout(timer);
    };
  }, []);
  return html`<main>
    <h2>Images</h2>
    ${error && html`<p class="error" role="alert" data-images-error>${error}</p>`}
    ${listed && listed.uploadNamespaces.length > 0 && html`<${UploadForm} namespaces=${listed.uploadNamespaces} />`}
    ${listed && listed.images.length === 0 && html`<p data-images-none>No images in ${listed.namespaces.length === 1 ? listed.namespaces[0] : 'the namespaces you may list images of'}.</p>`}
    ${
      listed &&
      listed.images.length > 0 &&
      html`<div class="table-wrap">
        <table aria-label="images">
          <thead>
            <tr>
              <th>Image</th>
              <th>Namespace</th>
              <th>Phase</th>
              <th>Size</th>
              <th>Source</th>
              <th>Message</th>
            </tr>
          </thead>
          <tbody>
            ${listed.images.map((image) => html`<${ImageRow} key=${`${image.namespace}/${image.name}`} image=${image} />`)}
          </tbody>
        </table>
      </div>`
    }
  </main>`;
}
