// tree — the call tree to scale (SVG)
//
// Every segment is one row; its bar is its budget (a retrying segment's bar shows the first
// attempt solid and the retry part hatched). Children run inside their parent's available
// time (timeout − reserve), starting with it: stages one after another, the children of one
// stage side by side (stacked rows, same start). Under each parent, a "need" row sums the
// stages; the part beyond the available time is red and says "INVERTED: N ms over".
//
// Every number — stages and their needs, need / available / excess, budget parts — is the
// server's (GET /baselines/{id}/tree); this only places them.
// ---------------------------------------------------------------------------------------

import { h, s } from './dom.js';
import { ui } from './ui.js';

/** "2 × 44 + 120": a budget's parts as the server took it apart. */
export function budgetParts(b) {
  return b.attempts + ' × ' + b.timeout_ms + (b.backoff_ms ? ' + ' + b.backoff_ms : '');
}

export const tree = {
  ROW: 30,
  LABEL_W: 300,
  WIDTH: 1200,

  /** Rows with absolute start times (ms), from the document's segments and the tree's numbers. */
  layout(doc, numbers) {
    const rows = [];
    const byId = new Map(doc.segments.map((x) => [x.id, x]));
    const parents = new Map(numbers.parents.map((p) => [p.segment, p]));
    // a parent is inverted when the server's findings say so
    const inverted = new Set(doc.findings.filter((f) => f.check === 'inversion').map((f) => f.segment));
    const walk = (seg, start, depth) => {
      rows.push({ kind: 'seg', seg, start, depth });
      const p = parents.get(seg.id);
      if (!p) return;
      let t = start;
      const bands = [];
      p.stages.forEach((st, i) => {
        const first = rows.length;
        for (const id of st.segments) walk(byId.get(id), t, depth + 1);
        bands.push({ index: i + 1, stage: st.stage, start: t, need: st.max_budget_ms, firstRow: first, lastRow: rows.length - 1, parallel: st.segments.length > 1 });
        t += st.max_budget_ms;
      });
      rows.push({ kind: 'need', seg, start, depth: depth + 1, need: p.need_ms, available: p.available_ms, excess: p.excess_ms, inverted: inverted.has(seg.id), bands });
    };
    for (const root of doc.segments.filter((x) => !x.parent)) walk(root, 0, 0);
    return rows;
  },

  niceStep(max) {
    const raw = max / 8;
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 2.5, 5, 10]) if (raw <= m * p) return m * p;
    return 10 * p;
  },

  render(doc, numbers) {
    if (!numbers) return ui.note('The call tree is unavailable (its numbers could not be read).');
    const parts = new Map(numbers.segments.map((b) => [b.segment, b]));
    const rows = this.layout(doc, numbers);
    let maxMs = 1;
    for (const r of rows) {
      maxMs = Math.max(maxMs, r.start + (r.kind === 'seg' ? r.seg.budget_ms : Math.max(r.need, r.available)));
    }
    const step = this.niceStep(maxMs);
    const scaleMax = Math.ceil(maxMs / step) * step;
    const x0 = this.LABEL_W;
    const chartW = this.WIDTH - x0 - 250; // room for the text after the longest bar
    const x = (ms) => x0 + (ms / scaleMax) * chartW;
    const top = 28;
    const height = top + rows.length * this.ROW + 10;
    const titleId = 'tree-title-' + doc.id;
    const descId = 'tree-desc-' + doc.id;
    const inversions = rows.filter((r) => r.kind === 'need' && r.inverted);

    const svg = s('svg', {
      class: 'tree', viewBox: '0 0 ' + this.WIDTH + ' ' + height, width: this.WIDTH, height,
      role: 'img', 'aria-labelledby': titleId + ' ' + descId, 'data-scale-max-ms': scaleMax,
    });
    svg.appendChild(s('title', { id: titleId }, 'Call tree of ' + doc.id + ' to scale (0 to ' + scaleMax + ' ms)'));
    svg.appendChild(s('desc', { id: descId }, rows.filter((r) => r.kind === 'need').map((r) =>
      'children of ' + r.seg.id + ' need ' + r.need + ' ms of ' + r.available + ' ms available' + (r.inverted ? ', INVERTED: ' + r.excess + ' ms over' : '') + '. ').join('')));
    svg.appendChild(s('defs', null,
      s('pattern', { id: 'hatch', width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' },
        s('rect', { width: 6, height: 6, class: 'hatch-bg' }), s('line', { x1: 0, y1: 0, x2: 0, y2: 6, class: 'hatch-line' })),
      s('pattern', { id: 'hatch-reserve', width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(-45)' },
        s('rect', { width: 6, height: 6, class: 'reserve-bg' }), s('line', { x1: 0, y1: 0, x2: 0, y2: 6, class: 'reserve-line' })),
      s('pattern', { id: 'hatch-over', width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' },
        s('rect', { width: 6, height: 6, class: 'over-bg' }), s('line', { x1: 0, y1: 0, x2: 0, y2: 6, class: 'over-line' }))));

    // axis and grid
    const axis = s('g', { class: 'axis' });
    for (let v = 0; v <= scaleMax + 1e-9; v += step) {
      axis.appendChild(s('line', { x1: x(v), x2: x(v), y1: top - 6, y2: height - 6, class: 'grid' }));
      axis.appendChild(s('text', { x: x(v), y: top - 10, class: 'tick', 'text-anchor': 'middle' }, Math.round(v) + (v === 0 ? '' : '')));
    }
    axis.appendChild(s('text', { x: x0 - 8, y: top - 10, class: 'tick', 'text-anchor': 'end' }, 'ms →'));
    svg.appendChild(axis);

    const rowY = (i) => top + i * this.ROW;
    const barH = this.ROW - 10;

    // stage bands behind the children of each parent
    rows.forEach((r) => {
      if (r.kind !== 'need') return;
      for (const b of r.bands) {
        const y = rowY(b.firstRow) + 1;
        const hgt = (b.lastRow - b.firstRow + 1) * this.ROW - 2;
        svg.appendChild(s('rect', { x: x(b.start), y, width: Math.max(1, x(b.start + b.need) - x(b.start)), height: hgt, class: 'stage-band' + (b.index % 2 ? '' : ' alt') }));
      }
    });

    rows.forEach((r, i) => {
      const y = rowY(i);
      const g = s('g', { class: 'row row-' + r.kind, 'data-segment': r.seg.id });
      if (r.kind === 'seg') {
        const seg = r.seg;
        const indent = r.depth * 16;
        const stage = seg.parent && seg.stage !== undefined && seg.stage !== null ? seg.stage : null;
        g.appendChild(s('text', { x: 8 + indent, y: y + barH / 2 + 9, class: 'label' }, (r.depth ? '└ ' : '') + seg.id,
          stage !== null ? s('tspan', { class: 'stage-label', dx: 6 }, 'stage ' + stage) : null));
        const b = parts.get(seg.id);
        const retries = Boolean(b && b.attempts > 1);
        const xs = x(r.start);
        const firstEnd = x(r.start + seg.timeout_ms);
        g.appendChild(s('rect', { x: xs, y: y + 5, width: Math.max(1, firstEnd - xs), height: barH, class: 'bar bar-' + seg.class + (seg.parent ? '' : ' bar-root') },
          s('title', null, seg.id + ': timeout ' + seg.timeout_ms + ' ms, budget ' + seg.budget_ms + ' ms')));
        if (retries) {
          g.appendChild(s('rect', { x: firstEnd, y: y + 5, width: Math.max(1, x(r.start + seg.budget_ms) - firstEnd), height: barH, class: 'bar bar-retry', fill: 'url(#hatch)' },
            s('title', null, (b.attempts - 1) + ' deadline retr' + (b.attempts > 2 ? 'ies' : 'y') + ' after a full timeout, worst-case backoff ' + b.backoff_ms + ' ms')));
        }
        if (seg.reserve_ms) {
          const rs = x(r.start + seg.timeout_ms - seg.reserve_ms);
          g.appendChild(s('rect', { x: rs, y: y + 5, width: Math.max(1, firstEnd - rs), height: barH, class: 'bar bar-reserve', fill: 'url(#hatch-reserve)' },
            s('title', null, 'reserve ' + seg.reserve_ms + ' ms (the handler\'s own work)')));
        }
        const text = seg.parent
          ? (retries ? 'budget ' + seg.budget_ms + ' ms = ' + budgetParts(b) : 'budget ' + seg.budget_ms + ' ms')
          : 'timeout ' + seg.timeout_ms + ' ms (entry)';
        g.appendChild(s('text', { x: x(r.start + seg.budget_ms) + 6, y: y + barH / 2 + 9, class: 'value' }, text + (seg.reserve_ms ? ', reserve ' + seg.reserve_ms : '')));
      } else {
        const over = r.inverted;
        const indent = r.depth * 16;
        g.setAttribute('class', 'row row-need' + (over ? ' inverted' : ''));
        g.appendChild(s('text', { x: 8 + indent, y: y + barH / 2 + 9, class: 'label label-need' }, 'Σ children of ' + r.seg.callee + (over ? ': ' + r.need + ' of ' + r.available + ' ms' : '')));
        const okEnd = r.start + Math.min(r.need, r.available);
        g.appendChild(s('rect', { x: x(r.start), y: y + 9, width: Math.max(1, x(okEnd) - x(r.start)), height: barH - 8, class: 'need' }));
        // the parent's available time, as a bracket
        g.appendChild(s('line', { x1: x(r.start + r.available), x2: x(r.start + r.available), y1: y + 2, y2: y + this.ROW - 2, class: 'available-mark' }));
        if (over) {
          g.appendChild(s('rect', { x: x(r.start + r.available), y: y + 5, width: Math.max(2, x(r.start + r.need) - x(r.start + r.available)), height: barH, class: 'over', fill: 'url(#hatch-over)' },
            s('title', null, 'INVERTED: ' + r.excess + ' ms over')));
        }
        const label = over
          ? 'INVERTED: ' + r.excess + ' ms over'
          : 'need ' + r.need + ' of ' + r.available + ' ms available';
        g.appendChild(s('text', { x: x(r.start + Math.max(r.need, r.available)) + 6, y: y + barH / 2 + 9, class: over ? 'value value-over' : 'value value-need' }, label));
      }
      svg.appendChild(g);
    });

    // children past their parent's available time: red overlay on the offending part
    rows.forEach((r) => {
      if (r.kind !== 'need' || !r.inverted) return;
      const limit = r.start + r.available;
      r.bands.forEach((b) => {
        for (let i = b.firstRow; i <= b.lastRow; i++) {
          const cr = rows[i];
          if (cr.kind !== 'seg' || cr.seg.parent !== r.seg.id) continue;
          const end = cr.start + cr.seg.budget_ms;
          if (end <= limit) continue;
          const from = Math.max(limit, cr.start);
          svg.appendChild(s('rect', { x: x(from), y: rowY(i) + 5, width: Math.max(1, x(end) - x(from)), height: barH, class: 'over-overlay', fill: 'url(#hatch-over)' }));
        }
      });
    });

    const legend = h('ul', { class: 'legend', 'aria-label': 'Legend' },
      h('li', null, h('span', { class: 'swatch sw-volatile' }), 'volatile (p999 + 30 %)'),
      h('li', null, h('span', { class: 'swatch sw-stable' }), 'stable (p99 + 10 %)'),
      h('li', null, h('span', { class: 'swatch sw-retry' }), 'deadline retry (attempts × timeout + worst-case backoff)'),
      doc.segments.some((x) => x.reserve_ms) ? h('li', null, h('span', { class: 'swatch sw-reserve' }), 'reserve (the handler\'s own work, not available to children)') : null,
      h('li', null, h('span', { class: 'swatch sw-band' }), 'stage: children side by side run in parallel; stages run one after another'),
      h('li', null, h('span', { class: 'swatch sw-over' }), 'over the parent\'s available time (INVERTED)'));

    return h('figure', { class: 'tree-figure' + (inversions.length ? ' has-inversion' : '') },
      h('div', { class: 'tree-scroll' }, svg),
      h('figcaption', null,
        inversions.length
          ? inversions.map((r) => h('p', { class: 'inversion-text' }, 'INVERTED: ' + r.excess + ' ms over — children of ' + r.seg.id + ' need ' + r.need + ' ms, only ' + r.available + ' ms available.'))
          : h('p', null, 'Every parent has room for its children (no inversion).'),
        legend));
  },
};
