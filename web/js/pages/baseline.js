// One baseline: its decision (approve / reject), findings, segments with their change vs the live
// baseline, the call tree to scale, rollout (with a canary's members, ACKs, health and its
// Promote / Abort), archive and releases.

import { api, caps } from '../api.js';
import { enc, h } from '../dom.js';
import { drift } from '../drift.js';
import { fmt } from '../format.js';
import { budgetParts, tree } from '../tree.js';
import { pageHead, ui } from '../ui.js';

export async function baseline(root, [id], ctx) {
  const idQ = enc(id);
  const doc = await api.get('/baselines/' + idQ);
  const c = caps.current();
  const chainQ = enc(doc.chain);
  const errors = doc.findings.filter((f) => f.severity === 'error');
  const [diff, run, numbers, check] = await Promise.all([
    api.get('/baselines/' + idQ + '/diff?against=current').catch((e) => ({ error: e })),
    api.get('/chains/' + chainQ + '/runs/' + enc(doc.run_id)).catch(() => null),
    api.get('/baselines/' + idQ + '/tree').catch(() => null),
    // whether this person may approve it now, and every reason not: the server's rules
    api.get('/baselines/' + idQ + '/approval').catch(() => null),
  ]);
  const budgetOf = new Map(numbers ? numbers.segments.map((b) => [b.segment, b]) : []);

  root.appendChild(pageHead('Baseline ' + doc.id,
    h('p', { class: 'lead' }, ui.state(doc.state), ' ', fmt.reason(doc.reason), ' · chain ', h('a', { href: '#/chains/' + chainQ }, doc.chain),
      ' · topology v' + doc.topology_version + ' · run ', h('span', { class: 'mono' }, doc.run_id),
      run ? ' uploaded by ' + run.uploaded_by : '', ' · created ' + fmt.time(doc.created_at) + ' by ' + doc.created_by),
    [h('a', { href: '#/' }, 'Chains'), ' / ', h('a', { href: '#/chains/' + chainQ }, doc.chain), ' / ', doc.id]));

  const grid = h('div', { class: 'baseline-grid' });
  root.appendChild(grid);

  // decision (approve / reject), only offered to approver/admin
  const decision = h('div', { class: 'area-decision' });
  grid.appendChild(decision);
  if (doc.decision) {
    decision.appendChild(ui.section('Decision', ui.facts([
      ['State', ui.state(doc.state)],
      ['By', doc.decision.by],
      ['At', fmt.time(doc.decision.at)],
      ['Comment', doc.decision.comment || '—'],
    ])));
  }
  if (doc.superseded_by) {
    decision.appendChild(ui.section('Superseded', h('p', { id: 'superseded-by' },
      doc.decision ? 'Replaced as the live baseline by ' : 'Replaced by the newer draft ', ui.baselineLink(doc.superseded_by),
      doc.decision ? '.' : ' before any decision: it can no longer be approved; review the newer one.')));
  }
  if (c.approve) decision.appendChild(approvePanel(doc, errors, run, check, ctx));
  else if (doc.state === 'draft') decision.appendChild(waiting(check));

  // findings in plain words
  grid.appendChild(h('div', { class: 'area-findings' }, ui.section('Findings',
    doc.findings.length
      ? h('ul', { class: 'findings', id: 'findings' }, doc.findings.map((f) => h('li', { class: 'finding finding-' + f.severity },
        h('span', { class: 'badge badge-' + f.severity }, f.severity.toUpperCase()), ' ', h('span', { class: 'check' }, f.check), ': ', f.message)))
      : h('p', { id: 'findings', class: 'no-findings' }, 'No findings: every check passed.'))));

  // segment table with change vs the live baseline
  const diffBy = new Map();
  let diffNote = null;
  if (diff && !diff.error) {
    for (const d of diff.segments) diffBy.set(d.id, d);
    const over = diff.drift_threshold_pct + ' %';
    diffNote = diff.from === doc.id ? 'This is the live baseline.' : 'Change vs the live baseline ' + diff.from + '; changes over ' + over + ' are marked ▲/▼ and “> ' + over + '”.';
  } else {
    diffNote = diff && diff.error && diff.error.status === 404 ? 'No approved baseline to compare with.' : 'Comparison unavailable: ' + (diff && diff.error ? diff.error.message : '');
  }
  const segRows = doc.segments.map((seg) => {
    const d = diffBy.get(seg.id);
    const big = d && ['budget_ms', 'timeout_ms', 'p99_ms', 'p999_ms'].some((k) => d[k] && d[k].drift);
    let change = '—';
    if (d && d.status === 'added') change = 'new segment';
    else if (d) {
      const parts = [h('span', null, 'budget ', drift.cell(d.budget_ms, ' ms', diff.drift_threshold_pct))];
      for (const k of ['p999_ms', 'p99_ms']) {
        if (d[k] && d[k].change_pct) parts.push(h('span', { class: 'sub-line' }, k.replace('_ms', '') + ' ', drift.cell(d[k], ' ms', diff.drift_threshold_pct)));
      }
      change = parts;
    }
    return {
      class: big ? 'row-big-change' : null,
      data: { segment: seg.id },
      cells: [
        h('span', { class: 'mono' }, seg.id),
        seg.class,
        fmt.num(seg.samples),
        seg.samples === undefined || seg.samples === null ? '—' : fmt.failures(seg.failures),
        fmt.ms(seg.p99_ms),
        fmt.ms(seg.p999_ms),
        fmt.rule(seg.rule),
        fmt.ms(seg.timeout_ms),
        [fmt.ms(seg.budget_ms), budgetOf.has(seg.id) && budgetOf.get(seg.id).attempts > 1 ? h('span', { class: 'sub' }, ' (' + budgetParts(budgetOf.get(seg.id)) + ')') : null],
        change,
      ],
    };
  });
  grid.appendChild(h('div', { class: 'area-segments' }, ui.section('Segments',
    ui.note(diffNote),
    ui.table([
      { label: 'Segment' }, { label: 'Class' }, { label: 'Samples', num: true }, { label: 'Failures', num: true }, { label: 'p99', num: true }, { label: 'p999', num: true }, { label: 'Rule' },
      { label: 'Timeout', num: true }, { label: 'Budget', num: true }, { label: 'Change vs live' },
    ], segRows, { id: 'segments-table', label: 'Segments', rowHeader: true }))));

  // the tree to scale
  grid.appendChild(h('div', { class: 'area-tree' }, ui.section('Call tree to scale', tree.render(doc, numbers))));

  // rollout, archive, releases
  const rollout = h('div', null, ui.loading());
  const archive = h('div', { id: 'archive' }, ui.loading());
  const releases = h('div', { id: 'releases' }, ui.loading());
  grid.appendChild(h('div', { class: 'area-facts' },
    ui.section('Rollout', rollout),
    ui.section('Archive', archive),
    ui.section('Releases citing it', releases)));
  const published = (kind) => ({ rollback: 'by a rollback', canary: 'to a canary', promote: "by the canary's promotion", abort: "by a canary's abort" })[kind] || 'on approval';
  // The rollout; while a canary bakes, read again every 5 s (members, ACKs, health, time left).
  let again = null;
  ctx.onCleanup(() => clearTimeout(again));
  const showRollout = () => ui.fill(rollout, api.get('/baselines/' + idQ + '/rollout'), (r) => {
    if (r.canary && r.canary.state === 'baking' && ctx.alive) again = setTimeout(showRollout, 5000);
    return [ui.facts([
      ['Revision', r.revision === null ? 'never published' : String(r.revision)],
      r.kind ? ['Published', h('span', { id: 'published-how' }, published(r.kind) + ' at ', ui.when(r.published_at), ' by ' + r.published_by)] : null,
      ['Acked', r.acked + ' of ' + r.agents + ' agents'],
      ['Connected', String(r.connected)],
      ['NACKed', r.nacked ? h('strong', { class: 'text-error' }, String(r.nacked)) : '0'],
    ]), r.canary ? canaryView(doc, r.canary, c, ctx) : null];
  });
  showRollout();
  ui.fill(archive, api.get('/baselines/' + idQ + '/archive'), (a) => ui.facts([
    ['Key', h('code', { class: 'break' }, a.key)],
    ['State', h('span', { class: 'badge archive-' + a.state }, a.state)],
    ['Archive', h('code', { class: 'break' }, a.archive)],
    ['Archived at', fmt.time(a.archived_at)],
    a.attempts !== null && a.attempts !== undefined ? ['Upload attempts', String(a.attempts)] : null,
    a.last_error ? ['Last error', h('span', { class: 'text-error' }, a.last_error)] : null,
    ['SHA-256', h('code', { class: 'break small' }, a.sha256 || '—')],
  ]));
  ui.fill(releases, api.get('/baselines/' + idQ + '/releases'), (r) => r.releases.length
    ? ui.table([{ label: 'Service' }, { label: 'Version' }, { label: 'Ticket' }, { label: 'By' }, { label: 'At' }],
      r.releases.map((x) => [x.service, x.version, x.ticket, x.created_by, ui.when(x.created_at)]), { label: 'Releases' })
    : ui.note('No release cites this baseline yet.'));
}

/** A canary selector in words. */
function selects(sel) {
  if (sel.percent !== undefined) return sel.percent + '% of agents (by a hash of their id)';
  return 'agents labelled ' + Object.entries(sel.labels).map(([k, v]) => k + '=' + v).join(', ');
}

/** How long until `iso`, or that it passed. */
function left(iso) {
  const ms = Date.parse(iso) - Date.now();
  if (ms <= 0) return 'ended';
  const s = Math.ceil(ms / 1000);
  return s < 120 ? s + ' s left' : Math.ceil(s / 60) + ' min left';
}

/**
 * A canary rollout: its state, members and their ACKs, the figures that decide, time left,
 * and, while it bakes, Promote / Abort for approvers (the server decides).
 */
function canaryView(doc, k, c, ctx) {
  const baking = k.state === 'baking';
  const msg = h('div', { id: 'canary-msg', 'aria-live': 'polite' });
  const act = (verb) => async () => {
    msg.replaceChildren(ui.loading(verb === 'promote' ? 'Promoting…' : 'Aborting…'));
    try {
      const res = await api.post('/baselines/' + enc(doc.id) + '/' + verb, {});
      ctx.flash(ui.ok('Canary of ' + doc.id + ' ' + res.state + ': every agent now runs revision ' + res.end_revision + '.'));
    } catch (e) {
      msg.replaceChildren(ui.error(e, verb === 'promote' ? 'Promotion failed' : 'Abort failed'));
    }
  };
  const health = k.health.length
    ? ui.table([{ label: 'Segment' }, { label: 'Calls', num: true }, { label: 'Amplification', num: true }, { label: 'Kill rate', num: true },
      { label: 'p99', num: true }, { label: 'p999', num: true }, { label: 'Drift', num: true }],
      k.health.map((x) => [x.segment, String(x.calls),
        x.amplification === null ? '—' : x.amplification.toFixed(3),
        x.kill_rate === null ? '—' : (x.kill_rate * 100).toFixed(2) + ' %',
        fmt.ms(x.p99_ms), fmt.ms(x.p999_ms),
        x.drift_pct === null ? '—' : (x.drift_pct > 0 ? '+' : '') + x.drift_pct.toFixed(1) + ' % (' + x.samples + ' samples)']),
      { id: 'canary-health', label: 'Canary health', stack: true })
    : ui.note('No report from canary agents yet.');
  return h('div', { id: 'canary', class: 'canary' },
    h('h3', null, 'Canary'),
    ui.facts([
      ['State', h('span', { id: 'canary-state', class: 'badge canary-' + k.state }, k.state)],
      ['Selects', selects(k.selector)],
      ['Members', h('span', { id: 'canary-members' }, k.members.length ? k.members.join(', ') : 'none yet')],
      ['Acked', h('span', { id: 'canary-acked' }, k.acked + ' of ' + k.members.length)],
      ['NACKed', k.nacked ? h('strong', { class: 'text-error' }, String(k.nacked)) : '0'],
      ['Others keep', ui.baselineLink(k.previous_baseline_id)],
      ['Bake', h('span', null, ui.when(k.bake_ends_at), baking ? ' (' + left(k.bake_ends_at) + ', ' + (k.auto ? 'decided automatically' : 'a person decides') + ')' : '')],
      k.reason ? ['Why it ended', h('span', { id: 'canary-reason' }, k.reason)] : null,
    ]),
    health,
    baking && c.approve ? h('div', { class: 'buttons' },
      h('button', { type: 'button', id: 'canary-promote', class: 'button-primary', onclick: act('promote') }, 'Promote to every agent'),
      h('button', { type: 'button', id: 'canary-abort', class: 'button-danger', onclick: act('abort') }, 'Abort')) : null,
    msg);
}

/** Blockers of `code` in the server's approval check (none without a check). */
function blockers(check, code) {
  return check ? check.blockers.filter((b) => b.code === code) : [];
}

/** For a draft, to someone who cannot approve it: who it waits for (and why not them). */
function waiting(check) {
  const own = blockers(check, 'four_eyes').length > 0;
  return ui.section('Decision', h('p', { id: 'waiting', class: 'note' },
    'Waiting for an approver' + (own ? ' (not you: you uploaded this run)' : '') + '.'));
}

/**
 * Approve / reject form. Approve is disabled up front, with every reason, when the server's
 * approval check says this person may not (not a pending draft, a newer draft, error findings,
 * four eyes); the server still decides.
 */
function approvePanel(doc, errors, run, check, ctx) {
  const reasons = [];
  let rejectBlocked = false;
  const stateBlocked = check ? blockers(check, 'not_draft').length + blockers(check, 'superseded').length > 0 : doc.state !== 'draft';
  if (stateBlocked) {
    reasons.push(doc.superseded_by && !doc.decision
      ? 'A newer draft (' + doc.superseded_by + ') replaced this one before any decision; only a pending draft can be approved or rejected.'
      : 'This baseline is ' + doc.state + '; only a draft can be approved or rejected.');
    rejectBlocked = true;
  }
  for (const b of blockers(check, 'not_newest')) reasons.push(b.message + '.');
  for (const b of blockers(check, 'canary_baking')) reasons.push(b.message.charAt(0).toUpperCase() + b.message.slice(1) + '.');
  if (errors.length && (!check || blockers(check, 'error_findings').length)) {
    reasons.push('Approval is blocked by ' + errors.length + ' error finding' + (errors.length > 1 ? 's' : '') + ': ' +
      errors.map((f) => f.check + ' on ' + f.segment).join(', ') + '. Fix the topology or the run and recompute; rejecting is still possible.');
  }
  if (blockers(check, 'four_eyes').length) {
    reasons.push('Four eyes: you uploaded this run' + (run ? ' (' + run.id + ')' : '') + ', so another person must approve it; rejecting is still possible.');
  }
  const approveBlocked = reasons.length > 0;
  const comment = h('textarea', { id: 'decision-comment', name: 'comment', rows: 3, maxlength: 4096, 'aria-describedby': 'decision-help' });
  const msg = h('div', { id: 'decision-msg', 'aria-live': 'polite' });
  const canaryOn = h('input', { type: 'checkbox', id: 'canary-on', name: 'canary' });
  const canarySel = h('input', { type: 'text', id: 'canary-select', name: 'canary-select', value: '10%', size: 14, 'aria-describedby': 'canary-help' });
  const canaryBake = h('input', { type: 'number', id: 'canary-bake', name: 'canary-bake', value: '300', min: 1, max: 604800, size: 7 });
  const canaryAuto = h('input', { type: 'checkbox', id: 'canary-auto', name: 'canary-auto', checked: true });
  const canaryBox = h('fieldset', { class: 'canary-options' },
    h('legend', null, h('label', null, canaryOn, ' Publish to a canary first')),
    h('label', { for: 'canary-select' }, 'Agents'), canarySel,
    h('label', { for: 'canary-bake' }, 'Bake (s)'), canaryBake,
    h('label', null, canaryAuto, ' Promote or abort automatically'),
    h('p', { id: 'canary-help', class: 'help' }, 'A share of agents (10%) or agents with labels (zone=a, or zone=a,tier=web). The others keep the live baseline until the canary is promoted; a NACK or canary agents breaking the amplification, kill-rate or drift rule abort it.'));
  const rollout = () => {
    if (!canaryOn.checked) return null;
    const raw = canarySel.value.trim();
    const canary = raw.endsWith('%')
      ? { percent: Number(raw.slice(0, -1)) }
      : { labels: Object.fromEntries(raw.split(',').map((p) => p.split('=').map((x) => x.trim()))) };
    return { canary, bake_s: Number(canaryBake.value), auto: canaryAuto.checked };
  };
  const approveBtn = h('button', { type: 'submit', id: 'approve', class: 'button-primary', value: 'approve', disabled: approveBlocked, 'aria-describedby': approveBlocked ? 'decision-reason' : null }, 'Approve and publish');
  const rejectBtn = h('button', { type: 'submit', id: 'reject', class: 'button-danger', value: 'reject', disabled: rejectBlocked }, 'Reject');
  const form = h('form', {
    id: 'decision-form', class: 'decision',
    onsubmit: async (ev) => {
      ev.preventDefault();
      const action = ev.submitter && ev.submitter.value === 'reject' ? 'reject' : 'approve';
      approveBtn.disabled = true;
      rejectBtn.disabled = true;
      msg.replaceChildren(ui.loading(action === 'approve' ? 'Approving…' : 'Rejecting…'));
      const text = comment.value.trim();
      try {
        const body = { comment: text || null };
        const canary = action === 'approve' ? rollout() : null;
        if (canary) body.rollout = canary;
        const res = await api.post('/baselines/' + enc(doc.id) + '/' + action, body);
        const done = action === 'approve'
          ? 'Approved ' + doc.id + ' — published as revision ' + res.revision + (canary ? ' to a canary first' : '') + (res.superseded ? ', superseding ' + res.superseded : '') + '.'
          : 'Rejected ' + doc.id + '.';
        ctx.flash(ui.ok(done));
      } catch (e) {
        msg.replaceChildren(ui.error(e, e.status === 403 ? 'The server refused' : action === 'approve' ? 'Approval failed' : 'Rejection failed'));
        approveBtn.disabled = approveBlocked;
        rejectBtn.disabled = rejectBlocked;
      }
    },
  },
  approveBlocked ? null : canaryBox,
  rejectBlocked ? null : h('label', { for: 'decision-comment' }, 'Comment (optional)'),
  rejectBlocked ? null : comment,
  rejectBlocked ? null : h('p', { id: 'decision-help', class: 'help' },
    'Approving publishes these budgets live to every agent of ' + doc.chain + '. Four eyes: the person who uploaded the run' +
    (run ? ' (' + run.uploaded_by + ')' : '') + ' cannot approve it; the server decides.'),
  approveBlocked ? h('p', { id: 'decision-reason', class: 'blocked-reason', role: 'note' }, h('strong', null, 'Cannot approve: '), reasons.join(' ')) : null,
  h('div', { class: 'buttons' }, approveBtn, rejectBtn),
  msg);
  return ui.section('Approve or reject', form);
}
