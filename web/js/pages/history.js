// A chain's history: the live baseline, every baseline (with rollback), and the audit log.

import { api, caps } from '../api.js';
import { enc, h } from '../dom.js';
import { fmt } from '../format.js';
import { chainTabs, pageHead, ui } from '../ui.js';

export async function history(root, [chain], ctx) {
  const chainQ = enc(chain);
  root.appendChild(pageHead('History of ' + chain, chainTabs(chain, 'history'), [h('a', { href: '#/' }, 'Chains'), ' / ', chain]));
  const c = caps.current();
  const [live, list, audit] = await Promise.all([
    api.get('/chains/' + chainQ + '/budgets').catch((e) => (e.status === 404 ? null : Promise.reject(e))),
    api.getAll('/chains/' + chainQ + '/baselines', 'baselines').then(({ items }) => ({ baselines: items })),
    api.get('/audit?chain=' + chainQ + '&limit=50'),
  ]);
  // how the live baseline became live (on approval, or again by a rollback): its publication
  const how = live ? await api.get('/baselines/' + enc(live.baseline_id) + '/rollout').catch(() => null) : null;
  const since = how && how.kind === 'rollback'
    ? [' · live again since ', ui.when(how.published_at), h('span', { class: 'rolled-back' }, ' by a rollback (' + how.published_by + ')')]
    : [' · published ' + fmt.time(live && live.published_at)];
  root.appendChild(h('p', { id: 'live', class: 'live-box' }, live
    ? [h('strong', null, 'Live: '), ui.baselineLink(live.baseline_id), ' · revision ' + live.revision, since]
    : 'Nothing published yet: approve a draft to go live.'));

  const msg = h('div', { id: 'rollback-msg', 'aria-live': 'polite' });
  const rows = list.baselines.map((b) => {
    let action = '—';
    // only a baseline that was approved can go live again (a draft a newer one replaced never was)
    if (b.state === 'superseded' && b.approved_at && c.approve) action = rollbackControl(chain, b, msg, ctx);
    else if (b.state === 'draft') action = h('a', { href: '#/baselines/' + enc(b.id) }, 'review');
    return {
      data: { baseline: b.id, state: b.state },
      cells: [ui.baselineLink(b.id),
        [ui.state(b.state), b.superseded_by ? h('span', { class: 'sub superseded-by' }, ' by ', ui.baselineLink(b.superseded_by)) : null],
        fmt.reason(b.reason), h('span', { class: 'mono' }, b.run_id), 'v' + b.topology_version,
        b.has_errors ? h('span', { class: 'badge badge-error' }, 'errors') : 'clean',
        [ui.when(b.created_at), h('span', { class: 'sub' }, ' by ' + b.created_by)], ui.when(b.updated_at), action],
    };
  });
  root.appendChild(ui.section('Baselines', msg, ui.table(
    [{ label: 'Baseline' }, { label: 'State' }, { label: 'Reason' }, { label: 'Run' }, { label: 'Topology' }, { label: 'Checks' }, { label: 'Created' }, { label: 'Updated' }, { label: 'Action' }],
    rows, { id: 'baselines-table', label: 'Baselines', rowHeader: true, empty: 'No baselines yet.' })));

  root.appendChild(ui.section('Audit log (latest 50)', ui.table(
    [{ label: 'At' }, { label: 'Actor' }, { label: 'Action' }, { label: 'Subject' }, { label: 'Detail' }],
    audit.entries.map((e) => [ui.when(e.at), e.actor, h('code', null, e.action), e.subject ? (/^bl-/.test(e.subject) ? ui.baselineLink(e.subject) : e.subject) : '—', detailText(e.detail)]),
    { id: 'audit-table', label: 'Audit log', empty: 'No entries.' })));
}

function detailText(d) {
  if (d === null || d === undefined) return '—';
  if (typeof d !== 'object') return String(d);
  const parts = Object.entries(d).filter(([, v]) => v !== null && v !== undefined).map(([k, v]) => k + ': ' + (typeof v === 'object' ? JSON.stringify(v) : v));
  return parts.length ? h('span', { class: 'detail' }, parts.join(' · ')) : '—';
}

/** "Roll back" → inline confirmation → POST /chains/{c}/rollback. */
function rollbackControl(chain, b, msg, ctx) {
  const box = h('div', { class: 'rollback' });
  const start = h('button', { type: 'button', class: 'button-quiet rollback-start', 'aria-label': 'Roll back to ' + b.id, onclick: () => showConfirm() }, 'Roll back to this');
  const showConfirm = () => {
    const confirm = h('button', { type: 'submit', class: 'button-danger rollback-confirm' }, 'Confirm rollback');
    const cancel = h('button', { type: 'button', class: 'button-quiet', onclick: () => { box.replaceChildren(start); start.focus(); } }, 'Cancel');
    const form = h('form', {
      class: 'rollback-form',
      onsubmit: async (ev) => {
        ev.preventDefault();
        confirm.disabled = true;
        try {
          const r = await api.post('/chains/' + enc(chain) + '/rollback', { baseline_id: b.id });
          ctx.flash(ui.ok('Rolled back ' + r.chain + ' to ' + r.baseline_id + ': live as revision ' + r.revision + (r.superseded ? ', superseding ' + r.superseded : '') + '.'));
        } catch (e) {
          msg.replaceChildren(ui.error(e, 'Rollback refused'));
          confirm.disabled = false;
        }
      },
    }, h('p', null, 'Republish ' + b.id + ' to every agent of ' + chain + '?'), h('div', { class: 'buttons' }, confirm, cancel));
    box.replaceChildren(form);
    confirm.focus();
  };
  box.appendChild(start);
  return box;
}
