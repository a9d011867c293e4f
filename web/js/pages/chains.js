// The chains overview: every chain with its live baseline, drafts, latest-run drift, rollout and
// archive state.

import { api } from '../api.js';
import { enc, h } from '../dom.js';
import { drift } from '../drift.js';
import { fmt } from '../format.js';
import { pageHead, ui } from '../ui.js';

export async function chains(root) {
  root.appendChild(pageHead('Chains', h('p', { class: 'lead' }, 'Every chain with its live baseline, drafts waiting for a decision, how the latest run compares with the live baseline, how far the live baseline has rolled out to agents, and its archive state.')));
  const { chains } = await api.get('/chains');
  if (!chains.length) {
    root.appendChild(ui.note('No chains yet. Apply a topology first: budgetctl topology apply --chain NAME topology.json'));
    return;
  }
  const rows = chains.map((c) => {
    const drafts = h('span', null, c.drafts ? '…' : '0');
    const driftCell = h('span', null, '…');
    const rollout = h('span', null, c.current_baseline ? '…' : '—');
    const archive = h('span', null, c.current_baseline ? '…' : '—');
    const chainQ = enc(c.name);
    if (c.drafts) {
      ui.fill(drafts, api.getAll('/chains/' + chainQ + '/baselines?state=draft', 'baselines').then(({ items }) => ({ baselines: items })), (r) =>
        h('span', { class: 'draft-list' }, r.baselines.map((b) => h('span', { class: 'draft-item' }, ui.baselineLink(b.id), b.has_errors ? h('span', { class: 'badge badge-error' }, 'errors') : null))));
    }
    const latestRun = api.get('/chains/' + chainQ + '/runs?limit=1').then((r) => r.runs[0] || null);
    ui.fill(driftCell, latestRun, (run) => {
      if (!run) return h('span', { class: 'muted' }, '— (no runs)');
      const d = drift.latest(run);
      if (!d) return h('span', { title: 'no approved baseline to compare ' + run.id + ' with' }, '—');
      return h('span', { class: ['change', d.drift ? 'change-big' : null] },
        drift.marker(d.pct), ' ', h('span', { class: 'sub' }, d.segment + ' ' + d.metric),
        d.drift ? h('span', { class: 'tag' }, ' DRIFT') : h('span', { class: 'sub' }, ' (within ' + d.threshold + ' %)'),
        h('br'), h('span', { class: 'sub mono' }, run.id));
    });
    if (c.current_baseline) {
      const id = enc(c.current_baseline);
      ui.fill(rollout, api.get('/baselines/' + id + '/rollout'), (r) => [
        h('span', { class: r.agents && r.acked >= r.agents ? 'ok' : null }, r.acked + '/' + r.agents + ' acked'),
        r.nacked ? h('span', { class: 'badge badge-error' }, r.nacked + ' NACK') : null,
        r.agents ? h('span', { class: 'sub' }, ' · ' + r.connected + ' connected') : null]);
      ui.fill(archive, api.get('/baselines/' + id + '/archive'), (a) => h('span', { class: 'badge archive-' + a.state }, a.state + (a.state === 'retrying' ? ' (' + a.attempts + ' attempts)' : '')));
    }
    return {
      data: { chain: c.name },
      cells: [
        h('a', { href: '#/chains/' + chainQ, class: 'chain-name' }, c.name),
        c.current_baseline ? [ui.baselineLink(c.current_baseline), h('span', { class: 'sub' }, ' rev ' + c.revision)] : h('span', { class: 'muted' }, 'none approved'),
        drafts,
        driftCell,
        rollout,
        archive,
        h('span', null, fmt.num(c.runs), ' ', h('a', { href: '#/chains/' + chainQ + '/runs', class: 'sub' }, 'runs & upload'),
          h('span', { class: 'sub' }, ' · '), h('a', { href: '#/chains/' + chainQ + '/production', class: 'sub' }, 'production')),
      ],
    };
  });
  root.appendChild(ui.table([
    { label: 'Chain' }, { label: 'Current baseline' }, { label: 'Pending drafts' }, { label: 'Latest run vs live' },
    { label: 'Rollout' }, { label: 'Archive' }, { label: 'Runs' },
  ], rows, { id: 'chains-table', label: 'Chains', rowHeader: true }));
}
