// Uploading a disk image from this browser into a new VirtualMachineImage: the file's disk size
// (raw: its size, qcow2: its virtual size; asked for when it is compressed) and SHA-256 (read in
// pieces, never whole in memory), the image made with them, then the file sent in pieces, each
// from where the importer says the upload stands, so a broken piece is sent again from there.
import { h } from 'preact';
import { useState } from 'preact/hooks';
import htm from 'htm';
import { sha256 } from '/vendor/noble-hashes/sha2.js';
import { api, csrfToken } from './client.js';
import { Field } from './form-field.js';

const html = htm.bind(h);
const PIECE = 8 * 1024 * 1024;
const GiB = 1024 * 1024 * 1024;
const ATTEMPTS = 5;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** What the file's first bytes say: compressed (size unknown), qcow2 (its virtual size) or raw. */
async function diskBytesOf(file) {
  const head = new DataView(await file.slice(0, 32).arrayBuffer());
  const byte = (i) => (head.byteLength > i ? head.getUint8(i) : -1);
  if ([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00].every((b, i) => byte(i) === b)) return undefined;
  if (byte(0) === 0x1f && byte(1) === 0x8b) return undefined;
  if ([0x51, 0x46, 0x49, 0xfb].every((b, i) => byte(i) === b)) return Number(head.getBigUint64(24));
  return file.size;
}

async function sha256Of(file, onProgress) {
  const hash = sha256.create();
  for (let at = 0; at < file.size; at += PIECE) {
    hash.update(new Uint8Array(await file.slice(at, at + PIECE).arrayBuffer()));
    onProgress(Math.min(at + PIECE, file.size));
  }
  return Array.from(hash.digest(), (b) => b.toString(16).padStart(2, '0')).join('');
}

/** Sends the file from where the upload stands; calls onProgress with the bytes the importer has. */
async function sendFile(path, file, onProgress) {
  let failures = 0;
  for (;;) {
    const state = await api('GET', path);
    if (state.phase === 'Failed') throw new Error(state.message);
    if (state.phase === 'Ready') return;
    if (!state.listening) {
      // Its claim is being made, its importer pod starting.
      await sleep(1000);
      continue;
    }
    let offset = state.offset ?? 0;
    try {
      while (offset < file.size) {
        const response = await fetch(path, {
          method: 'PATCH',
          credentials: 'same-origin',
          headers: {
            'X-CSRF-Token': csrfToken(),
            'Content-Type': 'application/offset+octet-stream',
            'Upload-Offset': String(offset),
            'Upload-Length': String(file.size),
          },
          body: file.slice(offset, offset + PIECE),
        });
        const answer = await response.json().catch(() => ({}));
        if (response.status !== 200) {
          // 409: the importer stands elsewhere (a piece broke off); others are final.
          if (response.status !== 409 && response.status < 500)
            throw Object.assign(new Error(answer.message), { final: true });
          throw new Error(answer.message ?? response.statusText);
        }
        // Where the importer stands now (a piece it did not take whole is sent again from there).
        if (typeof answer.offset !== 'number') throw new Error('the upload did not say where it stands');
        offset = answer.offset;
        onProgress(offset);
      }
      return;
    } catch (err) {
      if (err.final || ++failures >= ATTEMPTS) throw err;
      await sleep(1000);
    }
  }
}

export function UploadForm({ namespaces }) {
  const [namespace, setNamespace] = useState(namespaces[0]);
  const [name, setName] = useState('');
  const [file, setFile] = useState(undefined);
  const [sizeGi, setSizeGi] = useState('');
  const [compressed, setCompressed] = useState(false);
  const [errors, setErrors] = useState({});
  const [progress, setProgress] = useState('');
  const [busy, setBusy] = useState(false);
  const pick = async (e) => {
    const chosen = e.target.files[0];
    setFile(chosen);
    if (!chosen) return;
    setCompressed((await diskBytesOf(chosen)) === undefined);
    if (!name)
      setName(
        chosen.name
          .replace(/\..*$/, '')
          .toLowerCase()
          .replace(/[^a-z0-9-]+/g, '-')
          .replace(/^-+|-+$/g, ''),
      );
  };
  const submit = async (e) => {
    e.preventDefault();
    if (!file) return setErrors({ file: 'choose a file' });
    setBusy(true);
    setErrors({});
    try {
      const diskBytes = (await diskBytesOf(file)) ?? Math.round(Number(sizeGi) * GiB);
      const percent = (bytes) => `${Math.floor((100 * bytes) / Math.max(file.size, 1))}%`;
      const sum = await sha256Of(file, (bytes) => setProgress(`checking ${percent(bytes)}`));
      await api('POST', '/api/images', { namespace, name, diskBytes, sha256: sum });
      setProgress('waiting for its importer');
      const path = `/api/images/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}/upload`;
      await sendFile(path, file, (bytes) => setProgress(`sending ${percent(bytes)}`));
      setProgress(`sent (sha256 ${sum.slice(0, 12)}…); importing`);
      setName('');
    } catch (err) {
      setErrors(Object.keys(err.fields ?? {}).length > 0 ? err.fields : { form: err.message });
      setProgress('');
    } finally {
      setBusy(false);
    }
  };
  return html`<form class="upload" data-upload onSubmit=${submit} novalidate>
    <h3>Upload an image</h3>
    <${Field} id="upload-namespace" label="Namespace" error=${errors.namespace}>
      <select id="upload-namespace" value=${namespace} onChange=${(e) => setNamespace(e.target.value)}>
        ${namespaces.map((ns) => html`<option value=${ns}>${ns}</option>`)}
      </select>
    <//>
    <${Field} id="upload-file" label="Disk image (raw or qcow2, plain, xz or gzip)" error=${errors.file}>
      <input id="upload-file" type="file" onChange=${pick} />
    <//>
    ${
      compressed &&
      html`<${Field}
        id="upload-size"
        label="Disk size in GiB (the file is compressed)"
        error=${errors.diskBytes}
      >
        <input
          id="upload-size"
          type="number"
          min="1"
          value=${sizeGi}
          onInput=${(e) => setSizeGi(e.target.value)}
        />
      <//>`
    }
    <${Field} id="upload-name" label="Name" error=${errors.name}>
      <input id="upload-name" value=${name} onInput=${(e) => setName(e.target.value)} autocomplete="off" />
    <//>
    ${errors.form && html`<p class="error" data-error-for="form" role="alert">${errors.form}</p>`}
    <div class="actions">
      <button type="submit" data-action="upload" disabled=${busy}>Upload</button>
      ${progress && html`<span data-upload-progress>${progress}</span>`}
    </div>
  </form>`;
}
