// vmop's web GUI: Preact components written with htm (tagged templates, no build step). State
// comes from /api/live (server-sent events): the person's VMs and pools, then each change.
import { h, render } from 'preact';
import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import htm from 'htm';
import { api, loadMe } from './client.js';
import { ConsoleView } from './console.js';
import { ResourceInput, VmActions } from './vm-actions.js';
import { UsageChart } from './usage-chart.js';
import { NodesPage } from './nodes-page.js';
import { ImagesPage } from './images-page.js';
import { VmPage } from './vm-page.js';
import { NewVmPage } from './new-vm-page.js';
import { choicesOf, keyOf, selectVms } from './vm-list.js';

const html = htm.bind(h);

const OS_ICONS = {
  debian: '🌀',
  ubuntu: '🟠',
  fedora: '🔵',
  windows: '🪟',
  alpine: '🏔️',
  centos: '🟣',
  rhel: '🎩',
};
const osIcon = (os) => (os?.id && OS_ICONS[os.id]) ?? '🖥️';
const pageOf = (vm) => `/vm/${encodeURIComponent(vm.namespace)}/${encodeURIComponent(vm.name)}`;

/** The person's VMs and pools, kept live. */
function useLive() {
  const [state, setState] = useState({ vms: new Map(), pools: [], connected: false });
  useEffect(() => {
    const source = new EventSource('/api/live');
    source.addEventListener('snapshot', (e) => {
      const { vms, pools } = JSON.parse(e.data);
      setState({ vms: new Map(vms.map((vm) => [keyOf(vm), vm])), pools, connected: true });
    });
    source.addEventListener('vm', (e) => {
      const { vm } = JSON.parse(e.data);
      setState((s) => ({ ...s, vms: new Map(s.vms).set(keyOf(vm), vm) }));
    });
    source.addEventListener('vm-removed', (e) => {
      const gone = JSON.parse(e.data);
      setState((s) => {
        const vms = new Map(s.vms);
        vms.delete(keyOf(gone));
        return { ...s, vms };
      });
    });
    source.addEventListener('pools', (e) => setState((s) => ({ ...s, pools: JSON.parse(e.data).pools })));
    source.onerror = () => setState((s) => ({ ...s, connected: false }));
    return () => source.close();
  }, []);
  return state;
}

const phaseClass = (phase) => `phase phase-${phase.toLowerCase()}`;

function VmCard({ vm, onError }) {
  return html`<article class="card" data-vm=${keyOf(vm)} aria-label=${`VM ${vm.name}`}>
    <header>
      <span class="os" role="img" aria-label=${vm.os?.prettyName ?? 'operating system unknown'}
        >${osIcon(vm.os)}</span
      >
      <h3><a href=${pageOf(vm)} data-vm-link>${vm.name}</a></h3>
      <span class=${phaseClass(vm.phase)} data-phase>${vm.phase}</span>
    </header>
    <p class="detail">
      <span data-namespace>${vm.namespace}</span
      >${vm.os?.prettyName ? ` · ${vm.os.prettyName}` : ''}${vm.assignment ? html` · from pool ${vm.assignment.pool}` : ''}
    </p>
    ${vm.ipAddress && html`<p class="detail">Address: <span data-address>${vm.ipAddress}</span></p>`}
    ${vm.loggedInUser && html`<p class="detail">Logged in: <strong data-logged-in>${vm.loggedInUser}</strong></p>`}
    <${VmActions} vm=${vm} onError=${onError} />
  </article>`;
}

function PoolCard({ pool, vms, onError }) {
  const [busy, setBusy] = useState(false);
  const assign = async () => {
    setBusy(true);
    try {
      await api('POST', `/api/pools/${pool.namespace}/${pool.name}/assignment`);
    } catch (err) {
      onError(err.message);
    } finally {
      setBusy(false);
    }
  };
  const vm = pool.assignedVm && vms.get(`${pool.namespace}/${pool.assignedVm}`);
  return html`<article
    class="card pool"
    data-pool=${`${pool.namespace}/${pool.name}`}
    aria-label=${`pool ${pool.name}`}
  >
    <header>
      <span class="os" aria-hidden="true">🗂️</span>
      <h3>${pool.name}</h3>
      <span class="count">${pool.assigned} of ${pool.members} in use</span>
    </header>
    ${
      pool.assignedVm
        ? html`<p class="detail">
            Your VM:
            <strong data-assigned>${pool.assignedVm}</strong
            >${vm ? html` <span class=${phaseClass(vm.phase)}>${vm.phase}</span>` : ''}
          </p>`
        : html`<p class="detail">No VM of this pool is yours yet.</p>`
    }
    <div class="actions">
      ${!pool.assignedVm && html`<button type="button" data-action="assign" disabled=${busy} onClick=${assign}>Get a VM</button>`}
    </div>
  </article>`;
}

function UserView({ live, onError }) {
  const vms = [...live.vms.values()].sort((a, b) => a.name.localeCompare(b.name));
  return html`<main>
    ${
      live.pools.length > 0 &&
      html`<section aria-labelledby="pools-title">
        <h2 id="pools-title">Pools</h2>
        <div class="cards">
          ${live.pools.map((pool) => html`<${PoolCard} key=${pool.namespace + '/' + pool.name} pool=${pool} vms=${live.vms} onError=${onError} />`)}
        </div>
      </section>`
    }
    <section aria-labelledby="vms-title">
      <h2 id="vms-title">Your VMs</h2>
      ${vms.length === 0 ? html`<p>You have no VMs.</p>` : html`<div class="cards">${vms.map((vm) => html`<${VmCard} key=${keyOf(vm)} vm=${vm} onError=${onError} />`)}</div>`}
    </section>
  </main>`;
}

/**
 * A row's height until one is drawn and measured. Every admin row has the same height (style.css
 * keeps each on one line), so a window of rows and two spacers can stand in for them all.
 */
const ROW_HEIGHT_GUESS = 52;
/** Rows drawn above and below the visible ones, so a scroll shows drawn rows at once. */
const OVERSCAN = 15;

function AdminRow({ vm, index, onError }) {
  const editable = vm.may.includes('resources');
  return html`<tr data-vm=${keyOf(vm)} aria-rowindex=${index + 2}>
    <td>${osIcon(vm.os)} <a href=${pageOf(vm)} data-vm-link>${vm.name}</a></td>
    <td>${vm.namespace}</td>
    <td><span class=${phaseClass(vm.phase)} data-phase title=${vm.message ?? ''}>${vm.phase}</span></td>
    <td>
      <span data-cpus>${vm.cpus}</span
      >${editable ? html` <${ResourceInput} vm=${vm} field="currentCpus" onError=${onError} />` : ''}
    </td>
    <td>
      <span data-ram>${vm.ram}</span
      >${editable ? html` <${ResourceInput} vm=${vm} field="currentRam" onError=${onError} />` : ''}
    </td>
    <td data-node>${vm.node ?? ''}</td>
    <td data-address>${vm.ipAddress ?? ''}</td>
    <td><${VmActions} vm=${vm} onError=${onError} every=${true} /></td>
  </tr>`;
}

/** A picker of one of the list's choices ("" for all). */
function Picker({ label, all, value, options, onPick }) {
  return html`<select aria-label=${label} value=${value} onChange=${(e) => onPick(e.target.value)}>
    <option value="">${all}</option>
    ${options.map((option) => html`<option value=${option}>${option}</option>`)}
  </select>`;
}

/** A column header that sorts the table by its column, and again the other way. */
function SortHeader({ label, column, list, setList }) {
  const sorted = list.sortBy === column;
  const sort = () => setList({ ...list, sortBy: column, descending: sorted && !list.descending });
  return html`<th aria-sort=${sorted ? (list.descending ? 'descending' : 'ascending') : 'none'}>
    <button type="button" class="sort" data-sort=${column} onClick=${sort}>
      ${label}${sorted ? (list.descending ? ' ▼' : ' ▲') : ''}
    </button>
  </th>`;
}

/** The pickers over the table: the list's field each sets, its label, and the choice for all. */
const PICKERS = [
  ['namespace', 'Namespace', 'All namespaces', 'namespaces'],
  ['phase', 'Phase', 'All phases', 'phases'],
  ['node', 'Node', 'All nodes', 'nodes'],
];
/** The columns the table sorts by (selectVms' sortBy), with their headers. */
const SORTED_COLUMNS = [
  ['name', 'VM'],
  ['namespace', 'Namespace'],
  ['phase', 'Phase'],
  ['cpus', 'CPUs'],
  ['ram', 'RAM'],
  ['node', 'Node'],
];

/**
 * Every VM the person may see, in a table that draws only the rows in view (and a few around):
 * a thousand VMs cost as little to show and to update as a screenful.
 */
function AdminView({ me, live, onError }) {
  const [list, setList] = useState({
    text: '',
    namespace: '',
    phase: '',
    node: '',
    sortBy: 'name',
    descending: false,
  });
  const [view, setView] = useState({ top: 0, height: window.innerHeight });
  const [rowHeight, setRowHeight] = useState(ROW_HEIGHT_GUESS);
  const rows = useRef(null);
  // The rows as drawn (fonts, zoom and the phone's size decide), not as guessed.
  useLayoutEffect(() => {
    const drawn = rows.current?.querySelector('tr[data-vm]')?.getBoundingClientRect().height;
    if (drawn > 0 && Math.abs(drawn - rowHeight) >= 0.5) setRowHeight(drawn);
  });
  const all = [...live.vms.values()];
  const running = all.filter((vm) => vm.phase === 'Running');
  const cpus = running.reduce((sum, vm) => sum + vm.cpus, 0);
  const choices = choicesOf(all);
  const vms = selectVms(all, list);
  const first = Math.max(0, Math.floor(view.top / rowHeight) - OVERSCAN);
  const last = Math.min(vms.length, Math.ceil((view.top + view.height) / rowHeight) + OVERSCAN);
  const spacer = (count) =>
    count > 0 && html`<tr class="spacer" aria-hidden="true" style=${`height: ${count * rowHeight}px`}></tr>`;
  const onScroll = (e) => setView({ top: e.currentTarget.scrollTop, height: e.currentTarget.clientHeight });
  return html`<main>
    <section aria-label="summary" class="summary">
      <span>
        <strong data-summary="vms">${running.length}</strong>${' of '}<span data-summary="total"
          >${all.length}</span
        >${' VMs run'}
      </span>
      <span><strong data-summary="cpus">${cpus}</strong> CPUs in use</span>
    </section>
    ${
      me.seesCluster
        ? html`<${UsageChart} />`
        : html`<p data-admin-scope>
            Listed are the VMs you may use. Every VM of the cluster is listed for people who may list VMs in
            all namespaces.
          </p>`
    }
    ${all.length === 0 && html`<p data-admin-empty>There are no VMs to list.</p>`}
    <div class="finders">
      <input
        type="search"
        class="filter"
        aria-label="Filter VMs by namespace or name"
        placeholder="Filter by namespace/name or address"
        value=${list.text}
        onInput=${(e) => setList({ ...list, text: e.target.value })}
      />
      ${PICKERS.map(
        ([field, label, forAll, options]) =>
          html`<${Picker}
            key=${field}
            label=${label}
            all=${forAll}
            value=${list[field]}
            options=${choices[options]}
            onPick=${(value) => setList({ ...list, [field]: value })}
          />`,
      )}
    </div>
    <div class="table-wrap admin-rows" onScroll=${onScroll}>
      <table aria-rowcount=${vms.length + 1}>
        <thead>
          <tr>
            ${SORTED_COLUMNS.map(
              ([column, label]) =>
                html`<${SortHeader}
                  key=${column}
                  label=${label}
                  column=${column}
                  list=${list}
                  setList=${setList}
                />`,
            )}
            <th>Address</th>
            <th>Actions</th>
          </tr>
        </thead>
        <tbody ref=${rows}>
          ${spacer(first)}
          ${vms
            .slice(first, last)
            .map(
              (vm, i) =>
                html`<${AdminRow} key=${keyOf(vm)} vm=${vm} index=${first + i} onError=${onError} />`,
            )}
          ${spacer(vms.length - last)}
        </tbody>
      </table>
    </div>
  </main>`;
}

function App({ me }) {
  const live = useLive();
  const [error, setError] = useState('');
  const admin = location.pathname === '/admin';
  const nodes = location.pathname === '/nodes';
  const images = location.pathname === '/images';
  const newVm = location.pathname === '/new';
  const consoleRoute = /^\/console\/([^/]+)\/([^/]+)$/.exec(location.pathname);
  const vmRoute = /^\/vm\/([^/]+)\/([^/]+)$/.exec(location.pathname);
  const logout = async () => {
    await api('POST', '/auth/logout');
    location.href = '/auth/login';
  };
  return html`<div>
    <nav>
      <strong class="brand">vmop</strong>
      <a href="/" aria-current=${admin || nodes || images || newVm ? undefined : 'page'}>My VMs</a>
      <a href="/admin" aria-current=${admin ? 'page' : undefined}>All VMs</a>
      ${me.seesNodes && html`<a href="/nodes" aria-current=${nodes ? 'page' : undefined}>Nodes</a>`}
      ${me.seesImages && html`<a href="/images" aria-current=${images ? 'page' : undefined}>Images</a>`}
      ${me.createsVms && html`<a href="/new" data-action="new-vm" aria-current=${newVm ? 'page' : undefined}>New VM</a>`}
      <span class="me" data-user>${me.name ?? me.user}</span>
      <span class=${live.connected ? 'live on' : 'live off'} title=${live.connected ? 'live' : 'reconnecting'}
        >●</span
      >
      <button type="button" data-action="logout" onClick=${logout}>Log out</button>
    </nav>
    ${error && html`<p class="error" role="alert">${error} <button type="button" onClick=${() => setError('')}>Dismiss</button></p>`}
    ${
      consoleRoute
        ? html`<${ConsoleView}
            live=${live}
            namespace=${decodeURIComponent(consoleRoute[1])}
            name=${decodeURIComponent(consoleRoute[2])}
          />`
        : vmRoute
          ? html`<${VmPage}
              live=${live}
              namespace=${decodeURIComponent(vmRoute[1])}
              name=${decodeURIComponent(vmRoute[2])}
            />`
          : admin
            ? html`<${AdminView} me=${me} live=${live} onError=${setError} />`
            : nodes
              ? html`<${NodesPage} live=${live} />`
              : images
                ? html`<${ImagesPage} />`
                : newVm
                  ? html`<${NewVmPage} />`
                  : html`<${UserView} live=${live} onError=${setError} />`
    }
  </div>`;
}

const me = await loadMe();
const root = document.getElementById('app');
root.replaceChildren();
if (me) render(html`<${App} me=${me} />`, root);
