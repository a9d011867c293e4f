// A chain's production: what its agents reported over the last complete window (1m, 5m or 1h),
// per segment — the production p99 / p999 next to the live baseline's, retry amplification,
// timeout kill rate, idempotency-key coverage, drift — and each segment's latency distribution
// against its timeout. Refreshed every 10 s while the page is open.
//
// Every figure and flag is the server's (GET /chains/{chain}/production, GET /alerts): this
// page lays them out and recomputes no rule.

import { api } from '../api.js';
import { enc, h } from '../dom.js';
import { cdf } from '../cdf.js';
import { drift } from '../drift.js';
import { fmt } from '../format.js';
import { chainTabs, pageHead, ui } from '../ui.js';

const WINDOWS = [['1m', 'last minute'], ['5m', 'last 5 minutes'], ['1h', 'last hour']];
const REFRESH_MS = 10_000;

export async function production(root, [chain, windowParam], ctx) {
  const chainQ = enc(chain);
  const span = WINDOWS.some(([w]) => w === windowParam) ? windowParam : '5m';
  root.appendChild(pageHead('Production of ' + chain, chainTabs(chain, 'production'),
    [h('a', { href: '#/' }, 'Chains'), ' / ', h('a', { href: '#/chains/' + chainQ }, chain), ' / production']));
  root.appendChild(h('p', { class: 'lead' },
    'What the agents of ' + chain + ' reported over the last complete window, per segment, next to the live baseline: retry amplification (attempts / calls), ' +
    'timeout kill rate (deadline-exceeded attempts / attempts), idempotency-key coverage, and the latency of successful attempts against the timeout. ' +
    'Drift flags and alerts are the server’s.'));
  root.appendChild(h('nav', { class: 'segmented', id: 'window-select', 'aria-label': 'Window' },
    h('span', { class: 'segmented-label' }, 'Window'),
    WINDOWS.map(([w, words]) => h('a', {
      href: '#/chains/' + chainQ + '/production/' + w, 'data-window': w,
      'aria-current': w === span ? 'page' : null, title: words,
    }, w))));
  const status = h('p', { class: 'live', id: 'production-status', 'aria-live': 'off' }, 'Loading…');
  const alertsBox = h('div', { id: 'production-alerts' });
  const box = h('div', { id: 'production' });
  root.append(status, alertsBox, box);

  let observers = [];
  const disconnect = () => {
    observers.forEach((o) => o.disconnect());
    observers = [];
  };
  const render = (p, alerts) => {
    disconnect();
    // a refresh keeps what the reader opened
    const opened = new Set([...box.querySelectorAll('section.prod-segment details[open]')].map((d) => d.closest('section').dataset.segment));
    const mine = alerts.filter((a) => a.chain === chain);
    alertsBox.replaceChildren(mine.length
      ? h('div', { class: 'alert alert-error', role: 'status' },
        h('strong', null, mine.length + ' alert' + (mine.length === 1 ? '' : 's') + ' firing on ' + chain + ': '),
        mine.map((a, i) => [i ? '; ' : '', fmt.alertRule(a.rule), a.segment ? ' on ' + a.segment : '', ' (', fmt.alertValue(a)[0], ')']),
        ' — ', h('a', { href: '#/alerts' }, 'all alerts'))
      : '');
    status.textContent = 'Window ' + p.window + ': ' + fmt.time(p.from) + ' to ' + fmt.time(p.to) +
      (p.baseline_id ? ' · compared with the live baseline ' + p.baseline_id : ' · no approved baseline to compare with') +
      ' · refreshed every 10 s, updated ' + fmt.clock(new Date());
    status.classList.remove('text-error');
    if (!p.segments.length) {
      box.replaceChildren(h('div', { class: 'panel', id: 'production-empty' },
        h('h2', null, 'No production data in this window'),
        ui.note('No agent reported calls of ' + chain + ' between ' + fmt.time(p.from) + ' and ' + fmt.time(p.to) + '. ' +
          'Agents embedding budget-agent report every 10 s once they watch this chain; try a longer window, or check the Agents page.')));
      return;
    }
    box.replaceChildren(
      // on a phone the panels below say all of it: the summary is for wide screens
      h('div', { class: 'prod-summary' }, ui.section('Segments', summaryTable(p))),
      h('div', { class: 'prod-grid' }, p.segments.map((seg) => segmentPanel(seg, (o) => observers.push(o)))));
    for (const d of box.querySelectorAll('section.prod-segment details')) {
      if (opened.has(d.closest('section').dataset.segment)) d.open = true;
    }
  };

  ctx.onCleanup(disconnect);
  await ui.refresh(ctx, status, REFRESH_MS, async () => {
    const [p, alerts] = await Promise.all([
      api.get('/chains/' + chainQ + '/production?window=' + span),
      api.get('/alerts?state=firing').then((r) => r.alerts).catch(() => []),
    ]);
    if (!ctx.alive) return;
    render(p, alerts);
  });
}

/** "46.5 ms" over "baseline 44 ms". */
function vsBaseline(observed, baseline) {
  return h('span', { class: 'vs' }, h('span', { class: 'observed' }, fmt.ms(observed)),
    h('span', { class: 'sub-line' }, 'baseline ' + fmt.ms(baseline)));
}

/** The server's drift flag and its largest change. */
function driftCell(seg) {
  if (seg.drift_pct === null || seg.drift_pct === undefined) {
    return h('span', { class: 'muted', title: 'nothing to compare: no live baseline or no samples' }, '—');
  }
  return h('span', { class: ['change', seg.drift ? 'change-big' : null] }, drift.marker(seg.drift_pct),
    seg.drift ? h('span', { class: 'tag' }, ' DRIFT') : h('span', { class: 'sub' }, ' no drift'));
}

function summaryTable(p) {
  return ui.table([
    { label: 'Segment' }, { label: 'Calls', num: true }, { label: 'Attempts', num: true }, { label: 'Amplification', num: true },
    { label: 'Kill rate', num: true }, { label: 'Key coverage', num: true }, { label: 'p99', num: true },
    { label: 'p999', num: true }, { label: 'Timeout', num: true }, { label: 'Drift' },
    { label: 'Samples', num: true }, { label: 'Agents', num: true },
  ], p.segments.map((seg) => ({
    class: seg.drift ? 'row-big-change' : null,
    data: { segment: seg.segment },
    cells: [
      h('a', { href: '#/chains/' + enc(p.chain) + '/production/' + p.window, class: 'mono', onclick: (ev) => jumpTo(ev, seg.segment) }, seg.segment),
      fmt.num(seg.calls), fmt.num(seg.attempts), fmt.times(seg.amplification), fmt.share(seg.kill_rate), fmt.share(seg.key_coverage),
      vsBaseline(seg.p99_ms, seg.baseline_p99_ms), vsBaseline(seg.p999_ms, seg.baseline_p999_ms), fmt.ms(seg.timeout_ms),
      driftCell(seg), fmt.num(seg.samples), fmt.num(seg.agents),
    ],
  })), { id: 'production-table', label: 'Production figures per segment', rowHeader: true,
    caption: 'p99 and p999: production, with the live baseline’s under it. Amplification: attempts / calls; kill rate: deadline-exceeded attempts / attempts.' });
}

const anchor = (segment) => segment.replace(/[^A-Za-z0-9]+/g, '-');

/** A segment's name in the table: scrolls to its panel (the hash is the page's route). */
function jumpTo(ev, segment) {
  const target = document.getElementById('seg-' + anchor(segment) + '-h');
  if (!target) return;
  ev.preventDefault();
  target.setAttribute('tabindex', '-1');
  target.scrollIntoView({ block: 'start' });
  target.focus({ preventScroll: true });
}

/** One segment: its figures, its calls' retries and outcomes, and its latency distribution. */
function segmentPanel(seg, track) {
  const id = 'seg-' + anchor(seg.segment);
  const retries = seg.retries || {};
  const outcomes = seg.outcomes || {};
  const count = (v) => fmt.num(v === undefined ? null : v);
  return h('section', { class: ['panel', 'prod-segment', seg.drift ? 'prod-drift' : null], id, 'aria-labelledby': id + '-h', 'data-segment': seg.segment },
    h('h2', { id: id + '-h' }, h('span', { class: 'mono' }, seg.segment), seg.drift ? h('span', { class: 'badge badge-error' }, 'DRIFT ' + fmt.pct(seg.drift_pct)) : null),
    h('div', { class: 'prod-body' },
      h('div', { class: 'prod-facts' },
        ui.facts([
          ['p99', [h('strong', null, fmt.ms(seg.p99_ms)), h('span', { class: 'sub' }, ' baseline ' + fmt.ms(seg.baseline_p99_ms))]],
          ['p999', [h('strong', null, fmt.ms(seg.p999_ms)), h('span', { class: 'sub' }, ' baseline ' + fmt.ms(seg.baseline_p999_ms))]],
          ['p50', fmt.ms(seg.p50_ms)],
          ['Timeout', fmt.ms(seg.timeout_ms)],
          ['Drift', driftCell(seg)],
          ['Amplification', fmt.times(seg.amplification)],
          ['Kill rate', fmt.share(seg.kill_rate)],
          ['Key coverage', fmt.share(seg.key_coverage)],
          ['Calls / attempts', fmt.num(seg.calls) + ' / ' + fmt.num(seg.attempts)],
          ['Samples', fmt.num(seg.samples)],
          ['Agents', fmt.num(seg.agents)],
        ]),
        h('details', { class: 'prod-counts' }, h('summary', null, 'Retries and outcomes'),
          ui.table([{ label: 'Count' }, { label: 'Calls', num: true }], [
            ['retried on deadline', count(retries.deadline)],
            ['retried on unavailable', count(retries.unavailable)],
            ['ok', count(outcomes.ok)],
            ['deadline exceeded', count(outcomes.deadline_exceeded)],
            ['unavailable', count(outcomes.unavailable)],
            ['business error', count(outcomes.business_error)],
            ['budget exhausted', count(outcomes.budget_exhausted)],
            ['retry refused (no idempotency key)', count(outcomes.retry_refused_no_key)],
          ], { class: 'compact', label: 'Retries and outcomes of ' + seg.segment }))),
      h('div', { class: 'prod-plot' }, seg.distribution && seg.distribution.length
        ? cdf.figure(seg, track)
        : ui.note('No successful attempt was measured in this window: no latency distribution to draw.'))));
}
