// The agent fleet, polled every 2 s while the page is open.

import { api } from '../api.js';
import { enc, h } from '../dom.js';
import { fmt } from '../format.js';
import { pageHead, ui } from '../ui.js';

export async function agents(root, _params, ctx) {
  const status = h('p', { class: 'live', id: 'agents-status', 'aria-live': 'off' }, 'Loading…');
  const box = h('div', { id: 'agents' });
  root.appendChild(pageHead('Agents', h('p', { class: 'lead' }, 'Every agent seen: the service, its client library, the chains it receives, the replica it streams from, the revisions delivered and acknowledged, and refusals (NACK). Refreshed every 2 s while this page is open.')));
  root.appendChild(status);
  root.appendChild(box);
  const render = (agents) => box.replaceChildren(ui.table(
    [{ label: 'Agent' }, { label: 'Service' }, { label: 'Client' }, { label: 'Chains' }, { label: 'Replica' }, { label: 'Connected' },
      { label: 'Delivered', num: true }, { label: 'Acked', num: true }, { label: 'NACK' }, { label: 'Last seen' }],
    agents.map((a) => ({
      data: { agent: a.agent_id },
      class: a.nack_revision ? 'row-nack' : null,
      cells: [
        h('span', { class: 'mono' }, a.agent_id), a.service,
        a.client ? h('span', { class: 'mono' }, a.client) : '—',
        a.chains.map((ch, i) => [i ? ', ' : '', h('a', { href: '#/chains/' + enc(ch) }, ch)]),
        h('span', { class: 'mono' }, a.replica),
        a.connected ? h('span', { class: 'badge badge-ok' }, 'connected') : h('span', { class: 'badge' }, 'offline'),
        h('span', { class: 'delivered' }, String(a.delivered)),
        h('span', { class: a.acked < a.delivered ? 'text-warn' : null }, String(a.acked)),
        a.nack_revision ? h('span', { class: 'text-error' }, 'NACK rev ' + a.nack_revision + ': ' + (a.nack_error || '')) : '—',
        h('span', { title: a.last_seen }, fmt.ago(a.last_seen)),
      ],
    })), { id: 'agents-table', label: 'Agents', rowHeader: true, empty: 'No agent has connected yet.' }));

  let timer = null;
  const poll = async () => {
    try {
      const { items: agents, more } = await api.getAll('/agents', 'agents', 10);
      if (!ctx.alive) return;
      render(agents);
      status.textContent = (more ? 'First ' : '') + agents.length + ' agent' + (agents.length === 1 ? '' : 's') + ' · live, updated ' + fmt.clock(new Date());
      status.classList.remove('text-error');
    } catch (e) {
      if (!ctx.alive) return;
      status.textContent = 'Update failed (' + e.message + '); retrying every 2 s';
      status.classList.add('text-error');
    }
    if (ctx.alive) timer = setTimeout(poll, 2000);
  };
  ctx.onCleanup(() => clearTimeout(timer));
  await poll();
}
