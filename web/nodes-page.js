// The nodes page (/nodes): each node, whether it is ready or cordoned, what it offers and what the
// VMs placed on it hold. Loaded again at each VM change the live stream tells of, and every few
// seconds for the nodes' own state.
import { h } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import htm from 'htm';
import { api } from './client.js';

const html = htm.bind(h);
const GIB = 1024 ** 3;
const NODES_POLL_MS = 5000;
const gib = (bytes) => (bytes / GIB).toFixed(1);

function NodeRow({ node }) {
  return html`<tr data-node=${node.name}>
    <td>${node.name}</td>
    <td data-node-state>${node.ready ? 'Ready' : 'Not ready'}${node.schedulable ? '' : ', cordoned'}</td>
    <td><span data-node-running>${node.running}</span> of <span data-node-vms>${node.vms}</span></td>
    <td><span data-node-cpus-held>${node.cpusHeld}</span> of <span data-node-cpus>${node.cpus}</span></td>
    <td>
      <span data-node-ram-held data-bytes=${node.ramHeldBytes}>${gib(node.ramHeldBytes)}</span> of
      <span data-node-ram>${gib(node.ramBytes)}</span> GiB
    </td>
    <td data-node-slots>${node.vmSlots ?? '–'}</td>
  </tr>`;
}

export function NodesPage({ live }) {
  const [nodes, setNodes] = useState(undefined);
  const [error, setError] = useState('');
  useEffect(() => {
    let gone = false;
    const load = () =>
      api('GET', '/api/nodes')
        .then(({ nodes }) => !gone && (setNodes(nodes), setError('')))
        .catch((err) => !gone && setError(err.message));
    load();
    const timer = setInterval(load, NODES_POLL_MS);
    return () => {
      gone = true;
      clearInterval(timer);
    };
  }, [live.vms]);
  return html`<main>
    <h2>Nodes</h2>
    ${error && html`<p class="error" role="alert" data-nodes-error>${error}</p>`}
    ${
      nodes &&
      html`<div class="table-wrap">
        <table aria-label="nodes">
          <thead>
            <tr>
              <th>Node</th>
              <th>State</th>
              <th>VMs running</th>
              <th>CPUs held</th>
              <th>RAM held</th>
              <th>VM slots</th>
            </tr>
          </thead>
          <tbody>
            ${nodes.map((node) => html`<${NodeRow} key=${node.name} node=${node} />`)}
          </tbody>
        </table>
      </div>`
    }
  </main>`;
}
