// drift — change markers (the server's drift flags highlighted) and a chain's latest-run drift.

import { h } from './dom.js';
import { fmt } from './format.js';

export const drift = {
  /** "▲ +30.0 %" (text marker, so colour is never the only signal). */
  marker(pct) {
    if (pct === null || pct === undefined) return '';
    if (pct === 0) return '= no change';
    const arrow = pct > 0 ? '▲' : pct < 0 ? '▼' : '=';
    return arrow + ' ' + fmt.pct(pct);
  },
  /** A change cell of /diff: marker, with class "change-big" where the server flags drift. */
  cell(change, unit, threshold) {
    if (!change) return '—';
    const pct = change.change_pct;
    const big = Boolean(change.drift);
    return h('span', { class: ['change', big ? 'change-big' : null, pct === 0 ? 'change-none' : null] },
      pct === undefined ? 'n/a' : this.marker(pct),
      big ? h('span', { class: 'tag' }, ' > ' + threshold + ' %') : null,
      change.from !== change.to ? h('span', { class: 'sub' }, ' (' + fmt.num(change.from) + ' → ' + fmt.num(change.to) + (unit || '') + ')') : null);
  },
  /**
   * The latest run against the live baseline, as the server compared them (the run's
   * vs_live): the entry with the largest change. Null without a live baseline.
   */
  latest(run) {
    const live = run && run.vs_live;
    if (!live) return null;
    let worst = null;
    for (const e of live.comparison) {
      if (e.change_pct === null || e.change_pct === undefined) continue;
      if (!worst || Math.abs(e.change_pct) > Math.abs(worst.change_pct)) worst = e;
    }
    return worst ? { run: run.id, segment: worst.segment, metric: worst.metric, pct: worst.change_pct, drift: worst.drift, threshold: live.drift_threshold_pct } : null;
  },
};
