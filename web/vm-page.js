// The page of one VM (/vm/<namespace>/<name>): its state, what the person may do with it (as in
// the admin table), its conditions, disks, migration, snapshots and Events, and its CPU, memory, disk and network use over the last hour (samples its runner
// keeps; no Prometheus needed). Loaded again at each change the live stream tells of, and every
// sample period.
import { h } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import htm from 'htm';
import { api } from './client.js';
import { usePlot } from './plot.js';
import { DeleteButton, ResourceInput, VmActions } from './vm-actions.js';
import { VmYaml } from './vm-yaml.js';

const html = htm.bind(h);
const MIB = 1024 ** 2;
const HOUR = 3600;
const SNAPSHOT_POLL_MS = 2000;

const CHARTS = [
  {
    id: 'cpu',
    title: 'CPU (cores)',
    series: [['cpuCores', 'busy', (v) => v]],
  },
  {
    id: 'memory',
    title: 'Memory (MiB)',
    series: [
      ['residentBytes', 'taken from the node', (v) => v / MIB],
      ['guestUsedBytes', 'used by the guest', (v) => v / MIB],
    ],
  },
  {
    id: 'disk',
    title: 'Disk (MiB/s)',
    series: [
      ['diskReadBytesPerSecond', 'read', (v) => v / MIB],
      ['diskWriteBytesPerSecond', 'written', (v) => v / MIB],
    ],
  },
  {
    id: 'network',
    title: 'Network (MiB/s)',
    series: [
      ['netReceiveBytesPerSecond', 'received', (v) => v / MIB],
      ['netTransmitBytesPerSecond', 'sent', (v) => v / MIB],
    ],
  },
];
const COLOURS = ['#2563eb', '#16a34a'];

/** The latest value of a chart's series, in words, for the caption (and screen readers). */
function latestText(chart, points) {
  const parts = chart.series.flatMap(([field, label, scale]) => {
    const point = points.findLast((p) => p[field] !== undefined && p[field] !== null);
    return point ? [`${label} ${scale(point[field]).toFixed(2)}`] : [];
  });
  return parts.length > 0 ? `now ${parts.join(', ')}` : 'no samples yet';
}

function UseChart({ chart, points }) {
  const element = useRef(null);
  usePlot(
    element,
    150,
    () => ({
      data: [
        points.map((p) => p.t / 1000),
        ...chart.series.map(([field, , scale]) =>
          points.map((p) => (p[field] == null ? null : scale(p[field]))),
        ),
      ],
      options: {
        series: [{}, ...chart.series.map(([, label], i) => ({ label, stroke: COLOURS[i], width: 2 }))],
        scales: {
          x: { time: true, range: () => [Date.now() / 1000 - HOUR, Date.now() / 1000] },
          y: { range: (_u, _min, max) => [0, Math.max(max ?? 0, 0.01) * 1.2] },
        },
      },
    }),
    [points],
  );
  const summary = latestText(chart, points);
  return html`<figure class="usage" data-chart=${chart.id}>
    <figcaption>${chart.title}, last hour: <span data-latest>${summary}</span></figcaption>
    <div
      ref=${element}
      role="img"
      aria-label=${`chart of ${chart.title} over the last hour; ${summary}`}
    ></div>
  </figure>`;
}

const when = (iso) => (iso ? new Date(iso).toLocaleString() : '');

/**
 * The VM's snapshots, and what the person may do with them: take one, restore the VM to a Ready one
 * (vmop stops it for the copy and starts it again), clone one into a new VM.
 */
function Snapshots({ vm, snapshots, reload }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const may = new Set(vm.may);
  const base = `/api/vms/${encodeURIComponent(vm.namespace)}/${encodeURIComponent(vm.name)}/snapshots`;
  const act = async (path, body) => {
    setBusy(true);
    setError('');
    try {
      await api('POST', path, body);
      reload();
    } catch (err) {
      setError(err.message);
    } finally {
      setBusy(false);
    }
  };
  const restore = (snapshot) => {
    if (confirm(`Restore ${vm.name} to snapshot ${snapshot}? It is stopped for that and started again.`))
      void act(`${base}/${encodeURIComponent(snapshot)}/restore`);
  };
  const clone = (event, snapshot) => {
    event.preventDefault();
    const name = new FormData(event.currentTarget).get('name');
    void act(`${base}/${encodeURIComponent(snapshot)}/clone`, { name });
  };
  return html`<section aria-labelledby="snapshots-title" data-snapshots>
    <h3 id="snapshots-title">Snapshots</h3>
    ${
      may.has('snapshot') &&
      html`<p>
        <button type="button" data-action="snapshot" disabled=${busy} onClick=${() => act(base)}>
          Take a snapshot
        </button>
      </p>`
    }
    ${error && html`<p class="error" role="alert">${error}</p>`}
    ${
      snapshots.length === 0
        ? html`<p>No snapshots.</p>`
        : html`<div class="table-wrap">
            <table>
              <thead>
                <tr>
                  <th>Snapshot</th>
                  <th>Phase</th>
                  <th>Consistency</th>
                  <th>Size</th>
                  <th>Taken</th>
                  <th></th>
                </tr>
              </thead>
              <tbody>
                ${snapshots.map(
                  (s) =>
                    html`<tr key=${s.name} data-snapshot=${s.name}>
                      <td>${s.name}</td>
                      <td data-phase title=${s.message ?? ''}>${s.phase}</td>
                      <td>${s.consistency ?? ''}</td>
                      <td>${s.size ?? ''}</td>
                      <td>${when(s.cutAt ?? s.createdAt)}</td>
                      <td>
                        ${
                          s.phase === 'Ready' &&
                          may.has('restore') &&
                          html`<button
                            type="button"
                            data-action="restore"
                            disabled=${busy}
                            onClick=${() => restore(s.name)}
                          >
                            Restore
                          </button>`
                        }
                        ${
                          s.phase === 'Ready' &&
                          may.has('clone') &&
                          html`<form class="inline" data-clone onSubmit=${(event) => clone(event, s.name)}>
                            <input
                              name="name"
                              required
                              maxlength="52"
                              pattern="[a-z0-9]([-a-z0-9]*[a-z0-9])?"
                              aria-label=${`name of a new VM cloned from ${s.name}`}
                              placeholder="new VM's name"
                            />
                            <button type="submit" data-action="clone" disabled=${busy}>Clone</button>
                          </form>`
                        }
                      </td>
                    </tr>`,
                )}
              </tbody>
            </table>
          </div>`
    }
  </section>`;
}

/**
 * A VM's page: its details are loaded when it opens, again whenever the live stream tells of a
 * change of the VM (`live`, as the table has it), and every usage sample for the charts.
 */
export function VmPage({ namespace, name, live }) {
  const [details, setDetails] = useState(undefined);
  const [error, setError] = useState('');
  const [actionError, setActionError] = useState('');
  const loadNow = useRef(() => {});
  useEffect(() => {
    let timer;
    let over = false;
    let asked = 0;
    const load = async () => {
      clearTimeout(timer);
      const ask = ++asked;
      try {
        const next = await api(
          'GET',
          `/api/vms/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}`,
        );
        if (over || ask !== asked) return; // a newer load is under way
        setDetails(next);
        setError('');
        // A snapshot under way is not a change of the VM the live stream tells of: looked at sooner.
        const copying = next.snapshots.some((snapshot) => ['Pending', 'InProgress'].includes(snapshot.phase));
        timer = setTimeout(load, copying ? SNAPSHOT_POLL_MS : next.usage.sampleSeconds * 1000);
      } catch (err) {
        if (over || ask !== asked) return;
        setError(err.message);
        timer = setTimeout(load, 15_000);
      }
    };
    loadNow.current = load;
    void load();
    return () => {
      over = true;
      clearTimeout(timer);
    };
  }, [namespace, name]);
  // The live stream's summary of this VM is a new object at each change it tells of.
  const summary = live?.vms.get(`${namespace}/${name}`);
  const seen = useRef(summary);
  useEffect(() => {
    if (summary === seen.current) return;
    seen.current = summary;
    if (summary) void loadNow.current();
  }, [summary]);
  if (error && !details) return html`<main><p class="error" role="alert">${error}</p></main>`;
  if (!details) return html`<main><p>Loading ${name}…</p></main>`;
  const { vm, conditions, disks, migration, events, usage, snapshots } = details;
  return html`<main
    class="vm-page"
    data-vm-page=${`${namespace}/${name}`}
    data-usage-points=${usage.points.length}
  >
    <h2>${name} <small>${namespace}</small></h2>
    <p>
      <span class=${`phase phase-${vm.phase.toLowerCase()}`} data-phase>${vm.phase}</span>
      ${vm.node && html` on <span data-node>${vm.node}</span>`} ·
      <span data-size>${vm.cpus} ${vm.cpus === 1 ? 'CPU' : 'CPUs'}, ${vm.ram} RAM</span>
      ${vm.ipAddress && html` · address <span data-address>${vm.ipAddress}</span>`}
    </p>
    ${
      summary &&
      html`<div class="page-actions" data-page-actions>
        <${VmActions} vm=${summary} onError=${setActionError} every=${true} />
        ${
          summary.may.includes('resources') &&
          html`<${ResourceInput} vm=${summary} field="currentCpus" onError=${setActionError} />
            <${ResourceInput} vm=${summary} field="currentRam" onError=${setActionError} />`
        }
        ${summary.may.includes('delete') && html`<${DeleteButton} vm=${summary} onError=${setActionError} />`}
      </div>`
    }
    ${
      actionError &&
      html`<p class="error" role="alert">
        ${actionError} <button type="button" onClick=${() => setActionError('')}>Dismiss</button>
      </p>`
    }
    <section aria-label="use over the last hour" class="charts">
      ${CHARTS.map((chart) => html`<${UseChart} key=${chart.id} chart=${chart} points=${usage.points} />`)}
    </section>
    <h3>Conditions</h3>
    <div class="table-wrap">
      <table>
        <thead>
          <tr>
            <th>Condition</th>
            <th>Status</th>
            <th>Reason</th>
            <th>Message</th>
            <th>Since</th>
          </tr>
        </thead>
        <tbody>
          ${conditions.map(
            (c) =>
              html`<tr key=${c.type} data-condition=${c.type}>
                <td>${c.type}</td>
                <td data-status>${c.status}</td>
                <td>${c.reason}</td>
                <td>${c.message}</td>
                <td>${when(c.lastTransitionTime)}</td>
              </tr>`,
          )}
        </tbody>
      </table>
    </div>
    <h3>Disks</h3>
    ${
      disks.length === 0
        ? html`<p>No disks with claims.</p>`
        : html`<div class="table-wrap">
            <table>
              <thead>
                <tr>
                  <th>Disk</th>
                  <th>Claim</th>
                  <th>Size</th>
                  <th>Phase</th>
                  <th>Attachment</th>
                </tr>
              </thead>
              <tbody>
                ${disks.map(
                  (d) =>
                    html`<tr key=${d.name} data-disk=${d.name}>
                      <td>${d.name}</td>
                      <td>${d.claim}</td>
                      <td>${d.capacity ?? ''}</td>
                      <td>
                        ${d.phase}${d.progress ? ` ${d.progress}` : ''}${d.message ? `: ${d.message}` : ''}
                      </td>
                      <td>${d.attachment ? `${d.attachment.phase} (${d.attachment.reason})` : ''}</td>
                    </tr>`,
                )}
              </tbody>
            </table>
          </div>`
    }
    ${
      migration &&
      html`<h3>Migration</h3>
        <p data-migration>
          ${migration.sourceNode ?? ''} → ${migration.targetNode ?? ''}: ${migration.result ?? 'under way'}
          ${migration.downtimeMs !== undefined ? ` · the guest paused ${migration.downtimeMs} ms` : ''}
          ${migration.message ? ` · ${migration.message}` : ''} · ${when(migration.startTimestamp)}
        </p>`
    }
    <${Snapshots} vm=${vm} snapshots=${snapshots} reload=${() => loadNow.current()} />
    <${VmYaml} vm=${vm} />
    <h3>Events</h3>
    <ul class="events">
      ${events.map(
        (e, i) =>
          html`<li key=${i} data-event=${e.reason} class=${e.type === 'Warning' ? 'warning' : ''}>
            <time>${when(e.at)}</time>
            <strong>${e.reason}</strong>${e.count > 1 ? ` (×${e.count})` : ''}: ${e.message}
          </li>`,
      )}
    </ul>
  </main>`;
}
