// One baseline: its decision (approve / reject), findings, segments with their change vs the live
// baseline and what each timeout kills of the load test, each segment's latency distribution
// against its timeout (the live baseline's dashed beside it: the diff view), the call tree to
// scale, rollout (with a canary's members, ACKs, health and its Promote / Abort), archive and
// releases.

import { api, caps } from '../api.js';
import { cdf } from '../cdf.js';
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

  // each segment's latency distribution (built first: a kill-rate finding links to its plot)
  const live = diff && !diff.error && diff.from !== doc.id ? diff : null;
  const dists = distributions(doc, live, ctx);

  // findings in plain words
  grid.appendChild(h('div', { class: 'area-findings' }, ui.section('Findings',
    doc.findings.length
      ? h('ul', { class: 'findings', id: 'findings' }, doc.findings.map((f) => h('li', { class: 'finding finding-' + f.severity, 'data-check': f.check, 'data-segment': f.segment },
        h('span', { class: 'badge badge-' + f.severity }, f.severity.toUpperCase()), ' ', h('span', { class: 'check' }, f.check), ': ', f.message,
        f.check === 'timeout_kill_rate' && dists.has(f.segment)
          ? [' ', h('a', { href: '#/baselines/' + idQ, class: 'to-distribution', onclick: (ev) => { ev.preventDefault(); dists.show(f.segment); } }, 'see its distribution')]
          : null)))
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
        h('span', { class: 'killed' }, fmt.killed(seg.kill_rate, seg.kill_rate_bounds, seg.attempts_per_call)),
        change,
      ],
    };
  });
  grid.appendChild(h('div', { class: 'area-segments' }, ui.section('Segments',
    ui.note(diffNote),
    ui.table([
      { label: 'Segment' }, { label: 'Class' }, { label: 'Samples', num: true }, { label: 'Failures', num: true }, { label: 'p99', num: true }, { label: 'p999', num: true }, { label: 'Rule' },
      { label: 'Timeout', num: true }, { label: 'Budget', num: true }, { label: 'Killed', num: true }, { label: 'Change vs live' },
    ], segRows, { id: 'segments-table', label: 'Segments', rowHeader: true }),
    h('p', { class: 'help', id: 'killed-help' }, 'Killed: the share of the load test’s samples slower than the timeout, as the server counted it ' +
      '(bounds when the run gave percentile points only; — without a distribution), and the attempts per call it makes of a segment that retries on deadline.'))));

  grid.appendChild(h('div', { class: 'area-dists' }, ui.section('Latency distributions', dists.element)));

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

/**
 * Segments whose plot opens by itself. A chain may have up to 1000 segments, and each plot
 * costs one request per baseline (two in the diff view) and an SVG of up to 400 points a curve,
 * redrawn at every width: so a plot is drawn only when its segment is opened (<details>), and
 * only this many open by themselves — those with a timeout_kill_rate finding (errors first),
 * else the one whose timeout kills the largest share (the server's kill rate, or its upper
 * bound).
 */
const AUTO_OPEN = 3;

/**
 * Per segment of `doc`, a <details> whose latency distribution (GET /baselines/{id}/distribution)
 * is loaded and drawn when it is opened; in the diff view (`live`: the /diff against the live
 * baseline, when this is not it) with the live baseline's distribution dashed in the same plot.
 * A run without a distribution of the segment (a 404: percentiles only) gets a short note.
 * Returns {element, has(segment), show(segment)}.
 */
function distributions(doc, live, ctx) {
  const oldId = live ? live.from : null;
  const added = new Set(live ? live.segments.filter((d) => d.status === 'added').map((d) => d.id) : []);
  let observers = [];
  ctx.onCleanup(() => {
    observers.forEach((o) => o.disconnect());
    observers = [];
  });
  // one answer of the distribution endpoint, or null on a 404 (no distribution of the segment)
  const fetchOne = (id, segment) => api.get('/baselines/' + enc(id) + '/distribution?segment=' + enc(segment))
    .catch((e) => {
      if (e.status === 404) return null;
      throw e;
    });
  const bySegment = new Map();
  const load = async (seg, body) => {
    if (body.dataset.loaded) return;
    body.dataset.loaded = 'loading';
    body.replaceChildren(ui.loading('Loading the distribution…'));
    try {
      const [cur, old] = await Promise.all([
        fetchOne(doc.id, seg.id),
        oldId && !added.has(seg.id) ? fetchOne(oldId, seg.id) : null,
      ]);
      if (!ctx.alive) return;
      body.dataset.loaded = 'true';
      if (!cur && !old) {
        body.replaceChildren(h('p', { class: 'note no-distribution' },
          'No latency distribution to draw: run ' + doc.run_id + ' gave percentiles only for ' + seg.id +
          (oldId ? ', as did the live baseline’s' : '') + '.'));
        return;
      }
      body.replaceChildren(cdf.frame(cdf.runs(cur, old, seg), (o) => observers.push(o)));
      if (cur && oldId && !old && !added.has(seg.id)) {
        body.appendChild(ui.note('The live baseline’s run holds no distribution of ' + seg.id + ': only this run’s is drawn.'));
      }
    } catch (e) {
      delete body.dataset.loaded;
      body.replaceChildren(ui.error(e, 'Distribution unavailable'));
    }
  };
  const items = doc.segments.map((seg) => {
    const body = h('div', { class: 'dist-body' });
    const finding = doc.findings.find((f) => f.check === 'timeout_kill_rate' && f.segment === seg.id);
    const details = h('details', { class: 'dist', 'data-segment': seg.id, ontoggle: () => { if (details.open) load(seg, body); } },
      h('summary', null, h('span', { class: 'mono' }, seg.id),
        h('span', { class: 'sub' }, ' · timeout ' + fmt.ms(seg.timeout_ms) + ' · killed ' + fmt.killed(seg.kill_rate, seg.kill_rate_bounds, seg.attempts_per_call)),
        finding ? [' ', h('span', { class: 'badge badge-' + finding.severity }, finding.severity.toUpperCase() + ' ' + fmt.killShare(finding.kill_rate) + ' killed')] : null),
      body);
    bySegment.set(seg.id, { seg, details, body, finding });
    return details;
  });
  // what opens by itself (bounded: see AUTO_OPEN)
  const rank = { error: 0, warning: 1 };
  let auto = [...bySegment.values()].filter((x) => x.finding)
    .sort((a, b) => (rank[a.finding.severity] ?? 2) - (rank[b.finding.severity] ?? 2));
  if (!auto.length) {
    // the server's kill rate, or the upper of its bounds (percentile points)
    const kills = (x) => (x.seg.kill_rate !== null && x.seg.kill_rate !== undefined ? x.seg.kill_rate : Array.isArray(x.seg.kill_rate_bounds) ? x.seg.kill_rate_bounds[1] : 0);
    const worst = [...bySegment.values()].filter((x) => kills(x) > 0).sort((a, b) => kills(b) - kills(a))[0];
    auto = worst ? [worst] : [];
  }
  for (const x of auto.slice(0, AUTO_OPEN)) {
    x.details.open = true;
    load(x.seg, x.body);
  }
  const element = h('div', { id: 'distributions' },
    ui.note('The load test’s latency per segment on a log time axis, with its p99, p999 and timeout, and the share of samples slower than the timeout as the server counted it' +
      (oldId ? '; the live baseline ' + oldId + '’s distribution dashed beside it' : '') +
      '. A segment’s plot is drawn when it is opened.'),
    items);
  return {
    element,
    has: (segment) => bySegment.has(segment),
    /** Opens a segment's plot and brings it into view (from a finding). */
    show(segment) {
      const x = bySegment.get(segment);
      if (!x) return;
      x.details.open = true;
      load(x.seg, x.body);
      x.details.scrollIntoView({ block: 'start' });
      x.details.querySelector('summary').focus({ preventScroll: true });
    },
  };
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
