// cdf — a segment's production latency distribution (SVG): the share of successful attempts at
// or below each latency, on a log time axis, with the segment's timeout as a vertical line and
// the share of samples slower than it written beside it, and the production p99 / p999 (solid)
// next to the live baseline's (dashed).
//
// Every number is the server's (GET /chains/{chain}/production): the curve is its
// `distribution` points, the lines its percentiles and the live timeout. The share slower than
// the timeout is read off the distribution: one minus the share at the last point at or below
// the timeout (an upper bound, as the points are bucket edges).
// ---------------------------------------------------------------------------------------

import { h, s } from './dom.js';
import { fmt } from './format.js';

/**
 * The share of samples slower than `ms`, read from `[ms, share at or below]` points: one minus
 * the share at the last point at or below `ms`. Null without points or without `ms`.
 */
export function slowerThan(points, ms) {
  if (!points || !points.length || ms === null || ms === undefined) return null;
  let atOrBelow = 0;
  let at = null;
  for (const [x, share] of points) {
    if (x > ms) break;
    atOrBelow = share;
    at = x;
  }
  return { share: Math.max(0, 1 - atOrBelow), at };
}

/** Ticks of a log axis: every 1-2-5 step between lo and hi (both powers of ten). */
function logTicks(lo, hi) {
  const out = [];
  for (let d = lo; d <= hi * 1.0001; d *= 10) {
    for (const m of [1, 2, 5]) {
      const v = d * m;
      if (v >= lo * 0.9999 && v <= hi * 1.0001) out.push({ v, major: m === 1 });
    }
  }
  return out;
}

function tickLabel(ms) {
  if (ms >= 1000) return ms / 1000 + ' s';
  return (ms >= 1 ? String(ms) : String(Number(ms.toPrecision(2)))) + ' ms';
}

/** Rough width of a label in px (11–12 px system font): enough to keep labels apart. */
const textWidth = (t, size) => t.length * (size || 11) * 0.58;

export const cdf = {
  HEIGHT: 260,
  MARGIN: { top: 44, right: 14, bottom: 38, left: 46 },

  /** The vertical lines drawn over the curve: [{kind, ms, label}], absent values left out. */
  marks(seg) {
    return [
      { kind: 'base-p99', ms: seg.baseline_p99_ms, label: 'baseline p99 ' + fmt.ms(seg.baseline_p99_ms) },
      { kind: 'base-p999', ms: seg.baseline_p999_ms, label: 'baseline p999 ' + fmt.ms(seg.baseline_p999_ms) },
      { kind: 'p99', ms: seg.p99_ms, label: 'p99 ' + fmt.ms(seg.p99_ms) },
      { kind: 'p999', ms: seg.p999_ms, label: 'p999 ' + fmt.ms(seg.p999_ms) },
    ].filter((m) => m.ms !== null && m.ms !== undefined && m.ms > 0);
  },

  /** The plot of one segment at `width` px. */
  svg(seg, width) {
    // the server's points may start with empty buckets: the curve starts at the last of them
    const all = seg.distribution || [];
    const firstHit = all.findIndex((p) => p[1] > 0);
    const points = firstHit > 0 ? all.slice(firstHit - 1) : all;
    const m = this.MARGIN;
    const W = Math.max(260, Math.round(width));
    const H = this.HEIGHT;
    const plotW = W - m.left - m.right;
    const plotH = H - m.top - m.bottom;
    const marks = this.marks(seg);
    const timeout = seg.timeout_ms;
    const values = points.map((p) => p[0]).concat(marks.map((k) => k.ms), timeout ? [timeout] : []).filter((v) => v > 0);
    const lo = Math.pow(10, Math.floor(Math.log10(Math.min(...values))));
    let hi = Math.pow(10, Math.ceil(Math.log10(Math.max(...values) * 1.02)));
    if (hi <= lo) hi = lo * 10;
    const x = (ms) => m.left + ((Math.log10(Math.max(ms, lo)) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * plotW;
    const y = (share) => m.top + (1 - share) * plotH;
    const slower = slowerThan(all, timeout);
    const id = 'cdf-' + seg.segment.replace(/[^A-Za-z0-9]+/g, '-');

    const svg = s('svg', {
      class: 'cdf', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img',
      'aria-labelledby': id + '-title ' + id + '-desc', 'data-segment': seg.segment,
    });
    svg.appendChild(s('title', { id: id + '-title' }, 'Latency distribution of ' + seg.segment + ' (' + fmt.num(seg.samples) + ' successful attempts, log time axis)'));
    svg.appendChild(s('desc', { id: id + '-desc' },
      marks.map((k) => k.label).join(', ') + '. ' +
      (timeout ? 'Timeout ' + fmt.ms(timeout) + (slower ? ': ' + fmt.share(slower.share) + ' of samples slower.' : '.') : 'No live timeout.')));

    // grid and axes
    const grid = s('g', { class: 'grid' });
    for (const share of [0, 0.25, 0.5, 0.75, 1]) {
      grid.appendChild(s('line', { x1: m.left, x2: m.left + plotW, y1: y(share), y2: y(share), class: share === 0 ? 'axis-line' : 'grid-line' }));
      grid.appendChild(s('text', { x: m.left - 6, y: y(share) + 4, class: 'tick', 'text-anchor': 'end' }, Math.round(share * 100) + ' %'));
    }
    // every decade is labelled; 2 and 5 only where they fit between labels
    const ticks = logTicks(lo, hi).map((t) => ({ ...t, x: x(t.v), label: tickLabel(t.v) }));
    const placed = [];
    const fits = (t) => placed.every((p) => Math.abs(p.x - t.x) > (textWidth(p.label) + textWidth(t.label)) / 2 + 8);
    for (const t of ticks) {
      grid.appendChild(s('line', { x1: t.x, x2: t.x, y1: m.top, y2: m.top + plotH, class: t.major ? 'grid-line' : 'grid-line minor' }));
    }
    for (const t of ticks.filter((t) => t.major).concat(ticks.filter((t) => !t.major))) {
      if (!t.major && !fits(t)) continue;
      placed.push(t);
      grid.appendChild(s('text', { x: t.x, y: m.top + plotH + 15, class: 'tick', 'text-anchor': 'middle' }, t.label));
    }
    grid.appendChild(s('text', { x: m.left + plotW, y: H - 4, class: 'axis-title', 'text-anchor': 'end' }, 'latency (log scale) →'));
    grid.appendChild(s('text', { x: 4, y: 12, class: 'axis-title' }, '↑ share at or below'));
    svg.appendChild(grid);

    // the curve
    if (points.length) {
      const pts = [[points[0][0], 0]].concat(points);
      const d = pts.map((p, i) => (i ? 'L' : 'M') + x(p[0]).toFixed(1) + ' ' + y(p[1]).toFixed(1)).join(' ');
      svg.appendChild(s('path', { d: d + ' L' + x(pts[pts.length - 1][0]).toFixed(1) + ' ' + y(0) + ' Z', class: 'curve-area' }));
      svg.appendChild(s('path', { d, class: 'curve' }));
    }

    // percentile lines: production labels above the plot, the baseline's along its foot, each
    // group in two rows so neighbouring labels never overlap
    const rows = { top: [], foot: [] };
    for (const k of marks.slice().sort((a, b) => a.ms - b.ms)) {
      const xv = x(k.ms);
      const w = textWidth(k.label);
      const base = k.kind.startsWith('base');
      let anchor = 'middle';
      let left = xv - w / 2;
      if (base) {
        // along the foot, to the left of the line (the curve is low there)
        anchor = 'end';
        left = xv - 4 - w;
        if (left < m.left) { anchor = 'start'; left = xv + 4; }
      } else {
        if (left < m.left) { anchor = 'start'; left = xv - 2; }
        if (left + w > W - 2) { anchor = 'end'; left = xv - w + 2; }
      }
      const used = base ? rows.foot : rows.top;
      let row = used.findIndex((end) => left > end + 6);
      if (row === -1) row = used.length < 2 ? used.length : (used[0] <= used[1] ? 0 : 1);
      used[row] = left + w;
      const ty = base ? m.top + plotH - 6 - row * 13 : m.top - 8 - row * 13;
      svg.appendChild(s('g', { class: 'mark mark-' + k.kind, 'data-ms': k.ms },
        s('line', { x1: xv, x2: xv, y1: m.top - 2, y2: m.top + plotH }),
        s('text', { x: base ? (anchor === 'end' ? xv - 4 : xv + 4) : xv, y: ty, 'text-anchor': anchor, class: base ? 'mark-label base' : 'mark-label' }, k.label)));
    }

    // the timeout, with the share of samples slower than it beside it
    if (timeout) {
      const xv = x(timeout);
      const text = slower
        ? fmt.share(slower.share) + ' slower than the timeout'
        : 'no samples';
      const label = 'timeout ' + fmt.ms(timeout);
      const room = W - m.right - xv;
      const right = room > textWidth(text, 12) + 10;
      const tx = right ? xv + 6 : xv - 6;
      const anchor = right ? 'start' : 'end';
      svg.appendChild(s('g', { class: 'mark mark-timeout', 'data-ms': timeout, 'data-slower': slower ? slower.share : '' },
        s('line', { x1: xv, x2: xv, y1: m.top - 2, y2: m.top + plotH }),
        s('text', { x: tx, y: m.top + plotH * 0.45, 'text-anchor': anchor, class: 'timeout-label' }, label),
        s('text', { x: tx, y: m.top + plotH * 0.45 + 15, 'text-anchor': anchor, class: 'timeout-slower' }, text),
        s('title', null, slower && slower.at !== null
          ? 'Read from the distribution point at ' + fmt.ms(slower.at) + ', the last at or below the timeout'
          : 'No distribution point at or below the timeout')));
    }
    return svg;
  },

  /**
   * A figure that draws the plot at its own width and redraws when that changes. `track`
   * receives the ResizeObserver, for the page to disconnect on cleanup.
   */
  figure(seg, track) {
    const box = h('div', { class: 'cdf-box' });
    const slower = slowerThan(seg.distribution, seg.timeout_ms);
    const legend = h('ul', { class: 'legend', 'aria-label': 'Legend' },
      h('li', null, h('span', { class: 'swatch sw-curve' }), 'share of successful attempts at or below a latency'),
      h('li', null, h('span', { class: 'swatch sw-p' }), 'production p99 / p999'),
      h('li', null, h('span', { class: 'swatch sw-base' }), 'live baseline p99 / p999'),
      h('li', null, h('span', { class: 'swatch sw-timeout' }), 'timeout'));
    const caption = h('figcaption', null,
      h('p', { class: 'cdf-caption' }, seg.timeout_ms
        ? [h('strong', { class: 'slower' }, slower ? fmt.share(slower.share) : '—'), ' of ' + fmt.num(seg.samples) + ' samples slower than the timeout (' + fmt.ms(seg.timeout_ms) + ').']
        : 'No live timeout to compare with (the chain has no approved baseline).'),
      legend);
    const fig = h('figure', { class: 'cdf-figure', 'data-segment': seg.segment }, box, caption);
    let drawn = 0;
    const draw = (width) => {
      const w = Math.floor(width);
      if (!w || Math.abs(w - drawn) < 2) return;
      drawn = w;
      box.replaceChildren(this.svg(seg, w));
    };
    if (typeof ResizeObserver === 'function') {
      const ro = new ResizeObserver((entries) => draw(entries[0].contentRect.width));
      ro.observe(box);
      if (track) track(ro);
    }
    // first drawing once the figure is in the page (its width is known then)
    requestAnimationFrame(() => draw(box.clientWidth || 640));
    return fig;
  },
};
