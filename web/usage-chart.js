// The admin view's chart of the cluster's CPUs and RAM in use over the last 24 h. Shown only to
// people who may see every VM.
import { h } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import htm from 'htm';
import { api } from './client.js';
import { usePlot } from './plot.js';

const html = htm.bind(h);
const GIB = 1024 ** 3;

export function UsageChart() {
  const element = useRef(null);
  const [usage, setUsage] = useState(undefined);
  useEffect(() => {
    let timer;
    let over = false;
    const load = async () => {
      try {
        const next = await api('GET', '/api/usage');
        if (over) return;
        setUsage(next);
        timer = setTimeout(load, next.sampleSeconds * 1000);
      } catch {
        if (!over) setUsage(null); // not for this person
      }
    };
    void load();
    return () => {
      over = true;
      clearTimeout(timer);
    };
  }, []);
  usePlot(
    element,
    180,
    usage &&
      (() => {
        const { samples } = usage;
        return {
          data: [
            samples.map((s) => s.t / 1000),
            samples.map((s) => s.cpus),
            samples.map((s) => s.cpusUsed),
            samples.map((s) => s.ramBytes / GIB),
            samples.map((s) => s.ramUsedBytes / GIB),
          ],
          options: {
            series: [
              {},
              { label: 'CPUs held', stroke: '#2563eb', width: 2 },
              { label: 'CPUs busy', stroke: '#2563eb', width: 1, dash: [4, 4] },
              { label: 'RAM held (GiB)', stroke: '#16a34a', width: 2, scale: 'ram' },
              { label: 'RAM taken (GiB)', stroke: '#16a34a', width: 1, dash: [4, 4], scale: 'ram' },
            ],
            axes: [{}, { label: 'CPUs' }, { label: 'GiB', scale: 'ram', side: 1, grid: { show: false } }],
            scales: {
              // Always the last 24 h, and from 0 up: one sample must not look like a trend.
              x: { time: true, range: () => [Date.now() / 1000 - 24 * 3600, Date.now() / 1000] },
              y: { range: (_u, _min, max) => [0, Math.max(1, max) * 1.2] },
              ram: { range: (_u, _min, max) => [0, Math.max(1, max) * 1.2] },
            },
          },
        };
      }),
    [usage],
  );
  if (!usage) return null;
  const latest = usage.samples.at(-1);
  const summary = latest
    ? `now ${latest.cpus} CPUs and ${(latest.ramBytes / GIB).toFixed(1)} GiB of RAM in use by ${latest.vms} VMs`
    : 'no samples yet';
  // What the VMs' QEMUs use of it: CPU cores busy and the memory they take from the nodes.
  const used = latest
    ? `busy ${latest.cpusUsed.toFixed(2)} CPUs, taking ${(latest.ramUsedBytes / GIB).toFixed(2)} GiB`
    : '';
  return html`<figure class="usage" data-usage-points=${usage.samples.length}>
    <figcaption>
      CPUs and RAM in use, last 24 hours: <span data-usage-latest>${summary}</span>${used && '; '}<span
        data-usage-used
        >${used}</span
      >
    </figcaption>
    <div
      ref=${element}
      role="img"
      aria-label=${`chart of CPUs and RAM in use over the last 24 hours; ${summary}; ${used}`}
    ></div>
  </figure>`;
}
