// One labelled form field, with what was wrong with it beneath (read out with it).
import { h } from 'preact';
import htm from 'htm';

const html = htm.bind(h);

export function Field({ id, label, error, children }) {
  return html`<div class="field">
    <label for=${id}>${label}</label>
    ${children}
    ${error && html`<p class="field-error" id=${`${id}-error`} data-error-for=${id} role="alert">${error}</p>`}
  </div>`;
}
