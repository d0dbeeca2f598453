// A VM's consoles in the page: the SPICE display (spice-html5, LGPL-3.0-or-later), the VNC display
// (noVNC, MPL-2.0) and the serial console (xterm.js), each over a WebSocket the GUI bridges to the
// VM after checking the person.
import { h } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import htm from 'htm';
import { api } from './client.js';

const html = htm.bind(h);
const socketUrl = (path) => `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}${path}`;
const CLOSED = 'The console closed: someone else may have taken it over, or the VM stopped.';
const TAKEN_OVER_CODE = 4001; // the GUI's close code when another session opened the display
const TAKEN_OVER = 'Someone else opened this display and took it over. Reload the page to take it back.';
/** What the GUI said when it ended a console (consoles.ts: the login ended, the permission went). */
const endedByGui = (e) =>
  e.code > TAKEN_OVER_CODE && e.code < 4100 && e.reason ? `The console closed: ${e.reason}.` : undefined;

function SpiceDisplay({ vm }) {
  const [state, setState] = useState('connecting');
  useEffect(() => {
    let connection;
    let over = false;
    let takenOver = false;
    (async () => {
      try {
        const { url, password } = await api('POST', `/api/vms/${vm.namespace}/${vm.name}/console/spice`);
        const { SpiceMainConn } = await import('/vendor/spice/main.js');
        // Left before it connected (another tab): its screen element is gone, so no connection.
        if (over) return;
        connection = new SpiceMainConn({
          uri: socketUrl(url),
          password: password ?? '',
          screen_id: 'spice-screen',
          onsuccess: () => setState('connected'),
          onerror: (err) => !over && !takenOver && setState(`${CLOSED} (${err?.message ?? 'closed'})`),
        });
        // spice-html5 does not pass on the close code, which tells a takeover (consoles.ts) apart.
        connection.ws?.addEventListener('close', (e) => {
          if (over) return;
          const ended = e.code === TAKEN_OVER_CODE ? TAKEN_OVER : endedByGui(e);
          if (!ended) return;
          takenOver = true;
          setState(ended);
        });
      } catch (err) {
        if (!over) setState(err.message);
      }
    })();
    return () => {
      over = true;
      connection?.stop();
    };
  }, [vm.namespace, vm.name]);
  return html`<section aria-label="display">
    ${state !== 'connected' && html`<p class="console-state" role="status" data-display-state>${state}</p>`}
    <div id="spice-screen" class="spice-screen" tabindex="0" aria-label=${`display of ${vm.name}`}></div>
  </section>`;
}

function VncDisplay({ vm }) {
  const element = useRef(null);
  const [state, setState] = useState('connecting');
  useEffect(() => {
    let rfb;
    let over = false;
    (async () => {
      try {
        const { url, password } = await api('POST', `/api/vms/${vm.namespace}/${vm.name}/console/vnc`);
        const { default: RFB } = await import('/vendor/novnc/core/rfb.js');
        if (over) return;
        // Not shared: QEMU drops the one before, as SPICE does (the GUI has let this person take over).
        rfb = new RFB(element.current, socketUrl(url), {
          credentials: { password },
          shared: false,
          wsProtocols: ['binary'],
        });
        rfb.scaleViewport = true;
        rfb.addEventListener('connect', () => setState('connected'));
        rfb.addEventListener('securityfailure', (e) =>
          setState(`The display refused the password: ${e.detail.reason ?? e.detail.status}`),
        );
        rfb.addEventListener('disconnect', () => !over && setState(CLOSED));
      } catch (err) {
        if (!over) setState(err.message);
      }
    })();
    return () => {
      over = true;
      rfb?.disconnect();
    };
  }, [vm.namespace, vm.name]);
  return html`<section aria-label="VNC display">
    ${state !== 'connected' && html`<p class="console-state" role="status" data-vnc-state>${state}</p>`}
    <div
      ref=${element}
      class="vnc-screen"
      tabindex="0"
      aria-label=${`VNC display of ${vm.name}`}
      data-vnc
    ></div>
  </section>`;
}

function SerialTerminal({ vm }) {
  const element = useRef(null);
  const [state, setState] = useState('connecting');
  useEffect(() => {
    let socket;
    let terminal;
    let over = false;
    (async () => {
      try {
        const { url } = await api('POST', `/api/vms/${vm.namespace}/${vm.name}/console/serial`);
        const { Terminal } = await import('/vendor/xterm.mjs');
        // Left before it connected: a socket opened now would hold the console for nobody.
        if (over) return;
        terminal = new Terminal({ convertEol: false, cursorBlink: true, rows: 24 });
        terminal.open(element.current);
        socket = new WebSocket(socketUrl(url));
        socket.binaryType = 'arraybuffer';
        const encoder = new TextEncoder();
        terminal.onData((data) => socket.readyState === WebSocket.OPEN && socket.send(encoder.encode(data)));
        socket.onopen = () => {
          setState('connected');
          terminal.focus();
        };
        socket.onmessage = (e) => terminal.write(new Uint8Array(e.data));
        socket.onclose = (e) => setState(endedByGui(e) ?? CLOSED);
      } catch (err) {
        if (!over) setState(err.message);
      }
    })();
    return () => {
      over = true;
      socket?.close();
      terminal?.dispose();
    };
  }, [vm.namespace, vm.name]);
  return html`<section aria-label="serial console">
    ${state !== 'connected' && html`<p class="console-state" role="status" data-serial-state>${state}</p>`}
    <div ref=${element} class="terminal" data-terminal></div>
  </section>`;
}

export function ConsoleView({ live, namespace, name }) {
  const vm = live.vms.get(`${namespace}/${name}`);
  // ?view=serial opens the serial console first (opening the display would take it over from whoever has it).
  const [tab, setTab] = useState(new URLSearchParams(location.search).get('view') ?? undefined);
  if (!live.connected && !vm) return html`<main><p>Loading…</p></main>`;
  if (!vm)
    return html`<main><p role="alert">There is no VM ${name} in ${namespace} that you may see.</p></main>`;
  if (!vm.may.includes('accessConsole'))
    return html`<main><p role="alert">You may not open the console of ${name}.</p></main>`;
  // The first display the VM has unless a tab was chosen (?view=display|vnc|serial).
  const tabs = [vm.spice && 'display', vm.vnc && 'vnc', 'serial'].filter(Boolean);
  const shown = tabs.includes(tab) ? tab : tabs[0];
  const names = { display: 'Display', vnc: 'VNC', serial: 'Serial console' };
  const views = { display: SpiceDisplay, vnc: VncDisplay, serial: SerialTerminal };
  return html`<main class="console">
    <h2>${vm.name} <span class=${`phase phase-${vm.phase.toLowerCase()}`} data-phase>${vm.phase}</span></h2>
    <div role="tablist" class="tabs">
      ${tabs.map(
        (each) =>
          html`<button type="button" role="tab" aria-selected=${shown === each} onClick=${() => setTab(each)}>
            ${names[each]}
          </button>`,
      )}
    </div>
    <${views[shown]} key=${shown} vm=${vm} />
  </main>`;
}
