// Alerts: the firing ones first, then the resolved ones, each with the value that tripped its
// rule next to the threshold and the figures behind it. Refreshed every 10 s while open.
//
// Rules, thresholds and states are the server's (GET /alerts); this page only lays them out.

import { api } from '../api.js';
import { enc, h } from '../dom.js';
import { fmt } from '../format.js';
import { pageHead, ui } from '../ui.js';

const REFRESH_MS = 10_000;

export async function alerts(root, _params, ctx) {
  root.appendChild(pageHead('Alerts', h('p', { class: 'lead' },
    'Alerts raised from the agents’ reports and budgetd’s own state: retry amplification, timeout kill rate, production drift from the live baseline, ' +
    'agents refusing a config (NACK) and the archive backlog. Each fires once and resolves once; webhooks receive both. Refreshed every 10 s while this page is open.')));
  const status = h('p', { class: 'live', id: 'alerts-status', 'aria-live': 'off' }, 'Loading…');
  const firingBox = h('div', { id: 'alerts-firing-box' });
  const resolvedBox = h('div', { id: 'alerts-resolved-box' });
  root.append(status, firingBox, resolvedBox);

  const render = (list) => {
    // a refresh keeps the figures the reader opened
    const opened = new Set([...root.querySelectorAll('tr[data-alert] details[open]')].map((d) => d.closest('tr').dataset.alert));
    const firing = list.filter((a) => a.state === 'firing');
    const resolved = list.filter((a) => a.state !== 'firing');
    firingBox.replaceChildren(ui.section('Firing (' + firing.length + ')', alertTable(firing, false, 'alerts-firing', 'No alert is firing.')));
    resolvedBox.replaceChildren(ui.section('Resolved (' + resolved.length + ')', alertTable(resolved, true, 'alerts-resolved', 'No alert has resolved yet.')));
    for (const d of root.querySelectorAll('tr[data-alert] details')) {
      if (opened.has(d.closest('tr').dataset.alert)) d.open = true;
    }
  };

  await ui.refresh(ctx, status, REFRESH_MS, async () => {
    const { alerts: list } = await api.get('/alerts');
    if (!ctx.alive) return;
    render(list);
    const n = list.filter((a) => a.state === 'firing').length;
    status.textContent = n + ' firing · ' + (list.length - n) + ' resolved · live, updated ' + fmt.clock(new Date());
    status.classList.remove('text-error');
  });
}

function alertTable(list, resolved, id, empty) {
  const cols = [{ label: 'Rule' }, { label: 'Chain' }, { label: 'Segment' }, { label: 'Value', num: true }, { label: 'Threshold', num: true },
    { label: resolved ? 'Fired' : 'Since' }];
  if (resolved) cols.push({ label: 'Resolved' });
  cols.push({ label: 'Figures behind it' });
  return ui.table(cols, list.map((a) => {
    const [value, threshold] = fmt.alertValue(a);
    const cells = [
      h('span', null, fmt.alertRule(a.rule), h('span', { class: 'sub-line mono' }, '#' + a.id + ' ' + a.rule)),
      a.chain ? h('a', { href: '#/chains/' + enc(a.chain) + '/production', title: 'Production of ' + a.chain }, a.chain) : '—',
      a.segment ? h('span', { class: 'mono' }, a.segment) : '—',
      h('strong', { class: resolved ? null : 'text-error' }, value),
      threshold === null ? '—' : threshold,
      ui.when(a.since),
    ];
    if (resolved) cells.push(ui.when(a.resolved_at));
    cells.push(detail(a.detail));
    return { data: { alert: String(a.id), rule: a.rule, state: a.state }, class: resolved ? null : 'row-firing', cells };
  }), { id, label: resolved ? 'Resolved alerts' : 'Firing alerts', rowHeader: true, empty, stack: true });
}

/** The figures behind an alert's value (its window and counts), as the server recorded them. */
function detail(d) {
  const pairs = [];
  const walk = (obj, prefix) => {
    for (const [k, v] of Object.entries(obj || {})) {
      if (v === null || v === undefined) continue;
      if (typeof v === 'object' && !Array.isArray(v)) walk(v, prefix + k + '.');
      else if (typeof v === 'string' && /^\d{4}-\d\d-\d\dT/.test(v)) pairs.push([prefix + k, fmt.time(v)]);
      else pairs.push([prefix + k, Array.isArray(v) ? v.join(', ') : String(v)]);
    }
  };
  if (d && typeof d === 'object') walk(d, '');
  if (!pairs.length) return '—';
  return h('details', { class: 'alert-detail' }, h('summary', null, pairs.length + ' figure' + (pairs.length === 1 ? '' : 's')),
    h('dl', { class: 'facts' }, pairs.map(([k, v]) => [h('dt', null, k.replace(/_/g, ' ')), h('dd', { class: 'mono' }, v)])));
}
