// cdf — a segment's latency distribution (SVG): the share of samples at or below each latency,
// on a log time axis, with the timeout as a vertical line and the share of samples slower than
// it written beside it, and p99 / p999 lines. Two uses, one drawing (`draw`, from a plot
// description):
//
//   production (`svg`, `figure`)  — what the agents reported (GET /chains/{chain}/production):
//       the curve is its `distribution` points, the lines the production p99 / p999 (solid)
//       next to the live baseline's (dashed) and the live timeout. The share slower than the
//       timeout is read off the distribution: one minus the share at the last point at or
//       below the timeout (an upper bound, as the points are bucket edges).
//   a baseline's run (`runs`, `frame`) — the load test's distribution of a segment
//       (GET /baselines/{id}/distribution), its p99 / p999 and timeout, and the kill rate the
//       server gave (exact for histograms, bounds for percentile points: never recomputed
//       here); in the diff view a second, dashed curve with its own lines: the live baseline's.
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

/** The 1-2-5 step at or below `v` (`up`: at or above it). */
function step125(v, up) {
  const d = Math.pow(10, Math.floor(Math.log10(v)));
  const steps = [1, 2, 5, 10].map((m) => Number((d * m).toPrecision(12)));
  return up ? steps.find((x) => x >= v * 0.9999) : steps.filter((x) => x <= v * 1.0001).pop();
}

/** Ticks of a log axis: every 1-2-5 step between lo and hi (themselves 1-2-5 steps); decades major. */
function logTicks(lo, hi) {
  const out = [];
  for (let d = Math.pow(10, Math.floor(Math.log10(lo))); d <= hi * 1.0001; d *= 10) {
    for (const m of [1, 2, 5]) {
      const v = Number((d * m).toPrecision(12));
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

/** `text` in lines of at most `room` px (a word longer than that gets a line of its own). */
function wrap(text, room, size) {
  const lines = [];
  for (const word of text.split(' ')) {
    const last = lines.length ? lines[lines.length - 1] + ' ' + word : null;
    if (last !== null && textWidth(last, size) <= room) lines[lines.length - 1] = last;
    else lines.push(word);
  }
  return lines;
}

/** The server's points without their leading empty buckets (the curve starts at the last). */
function trimmed(points) {
  const all = points || [];
  const firstHit = all.findIndex((p) => p[1] > 0);
  return firstHit > 0 ? all.slice(firstHit - 1) : all;
}

/** What a baseline's timeout kills, in the server's numbers: "25 %", "0.1–1 %", null. */
function killText(d) {
  if (d.kill_rate !== null && d.kill_rate !== undefined) return fmt.killShare(d.kill_rate);
  if (Array.isArray(d.kill_rate_bounds)) return fmt.killed(null, d.kill_rate_bounds, null);
  return null;
}

/** Element ids unique in the page (a plot is redrawn at each width; segment ids may collide once sanitised). */
let drawn = 0;

export const cdf = {
  HEIGHT: 260,
  MARGIN: { top: 44, right: 14, bottom: 38, left: 46 },

  /** The vertical lines of a production plot: [{kind, ms, label}], absent values left out. */
  marks(seg) {
    return [
      { kind: 'base-p99', ms: seg.baseline_p99_ms, label: 'baseline p99 ' + fmt.ms(seg.baseline_p99_ms) },
      { kind: 'base-p999', ms: seg.baseline_p999_ms, label: 'baseline p999 ' + fmt.ms(seg.baseline_p999_ms) },
      { kind: 'p99', ms: seg.p99_ms, label: 'p99 ' + fmt.ms(seg.p99_ms) },
      { kind: 'p999', ms: seg.p999_ms, label: 'p999 ' + fmt.ms(seg.p999_ms) },
    ].filter((m) => m.ms !== null && m.ms !== undefined && m.ms > 0);
  },

  /**
   * A production segment (GET /chains/{chain}/production) as a plot description for `draw` and
   * `frame`: its curve, percentile lines (the baseline's dashed, labelled along the foot) and
   * the live timeout with the share of samples slower than it, read off the distribution.
   */
  production(seg) {
    const slower = slowerThan(seg.distribution, seg.timeout_ms);
    const marks = this.marks(seg).map((k) => ({ ...k, foot: k.kind.startsWith('base') }));
    const timeout = seg.timeout_ms;
    return {
      segment: seg.segment,
      title: 'Latency distribution of ' + seg.segment + ' (' + fmt.num(seg.samples) + ' successful attempts, log time axis)',
      desc: marks.map((k) => k.label).join(', ') + '. ' +
        (timeout ? 'Timeout ' + fmt.ms(timeout) + (slower ? ': ' + fmt.share(slower.share) + ' of samples slower.' : '.') : 'No live timeout.'),
      curves: [{ points: seg.distribution || [], name: 'this' }],
      marks,
      timeouts: timeout ? [{
        kind: 'timeout', ms: timeout, label: 'timeout ' + fmt.ms(timeout),
        text: slower ? fmt.share(slower.share) + ' slower than the timeout' : 'no samples',
        slower: slower ? slower.share : '',
        note: slower && slower.at !== null
          ? 'Read from the distribution point at ' + fmt.ms(slower.at) + ', the last at or below the timeout'
          : 'No distribution point at or below the timeout',
      }] : [],
      caption: h('p', { class: 'cdf-caption' }, timeout
        ? [h('strong', { class: 'slower' }, slower ? fmt.share(slower.share) : '—'), ' of ' + fmt.num(seg.samples) + ' samples slower than the timeout (' + fmt.ms(timeout) + ').']
        : 'No live timeout to compare with (the chain has no approved baseline).'),
      legend: [
        ['sw-curve', 'share of successful attempts at or below a latency'],
        ['sw-p', 'production p99 / p999'],
        ['sw-base', 'live baseline p99 / p999'],
        ['sw-timeout', 'timeout'],
      ],
    };
  },

  /**
   * A baseline segment's load-test distribution (GET /baselines/{id}/distribution: `cur`) as a
   * plot description, and in the diff view the live baseline's (`old`: the endpoint's answer
   * for the live baseline, else null): its curve dashed, its p99 / p999 labelled along the foot
   * and its timeout as a dashed line. `seg` is the baseline document's segment (attempts per call).
   * Either answer may be null (its run holds no distribution of the segment), not both.
   */
  runs(cur, old, seg) {
    const main = cur || old;
    const both = Boolean(cur && old);
    const marks = [];
    const timeouts = [];
    const desc = [];
    const who = (d) => (d === old ? 'the live baseline ' + d.baseline_id : 'this baseline');
    for (const d of [old, cur]) {
      if (!d) continue;
      const isOld = d === old;
      for (const [kind, ms, name] of [['p99', d.p99_ms, 'p99'], ['p999', d.p999_ms, 'p999']]) {
        if (ms === null || ms === undefined || !(ms > 0)) continue;
        marks.push({ kind: (isOld ? 'base-' : '') + kind, ms, label: (isOld ? 'live ' : '') + name + ' ' + fmt.ms(ms), foot: isOld });
      }
      const killed = killText(d);
      timeouts.push({
        kind: isOld ? 'timeout-old' : 'timeout', ms: d.timeout_ms,
        label: (isOld ? 'live timeout ' : 'timeout ') + fmt.ms(d.timeout_ms),
        text: killed === null ? 'kill rate unknown' : isOld ? killed + ' slower' : killed + ' of load-test calls slower than the timeout',
        slower: d.kill_rate !== null && d.kill_rate !== undefined ? d.kill_rate : '',
        note: d.source === 'histogram'
          ? 'The server’s kill rate: the share of the run’s ' + fmt.num(d.samples) + ' samples slower than ' + fmt.ms(d.timeout_ms)
          : 'Bounds from the run’s percentile points: it holds no histogram',
      });
      desc.push('Timeout of ' + who(d) + ' ' + fmt.ms(d.timeout_ms) + (killed === null ? '' : ': ' + killed + ' of load-test calls slower') + '.');
    }
    const count = (d) => (d.samples === null || d.samples === undefined ? 'percentile points' : fmt.num(d.samples) + ' samples');
    const caption = [];
    if (cur) {
      const killed = killText(cur);
      const attempts = seg && seg.attempts_per_call !== null && seg.attempts_per_call !== undefined ? seg.attempts_per_call : null;
      caption.push(h('p', { class: 'cdf-caption' },
        h('strong', { class: 'slower' }, killed === null ? '—' : killed),
        ' of the load test’s calls (' + count(cur) + ' of run ' + cur.run_id + ') slower than the timeout (' + fmt.ms(cur.timeout_ms) + ')' +
        (cur.source === 'percentiles' ? ': bounds, as the run holds percentile points only' : '') +
        (attempts !== null ? '; retried on deadline, that is ' + Number(attempts.toFixed(3)) + ' attempts per call' : '') + '.'));
    } else {
      caption.push(h('p', { class: 'cdf-caption' }, 'This baseline’s run holds no latency distribution of ' + old.segment + ': only the live baseline’s is drawn.'));
    }
    if (old) {
      caption.push(h('p', { class: 'cdf-caption cdf-caption-old' },
        'Live baseline ', h('span', { class: 'mono' }, old.baseline_id), ' (dashed, run ' + old.run_id + ', ' + count(old) + '): timeout ' + fmt.ms(old.timeout_ms) +
        (killText(old) === null ? '.' : ', ' + killText(old) + ' slower.')));
    }
    return {
      segment: main.segment,
      height: both ? 300 : this.HEIGHT,
      title: 'Latency distribution of ' + main.segment + ' in ' +
        (cur ? 'the load test of run ' + cur.run_id + ' (' + count(cur) + ')' + (old ? ' against the live baseline’s run ' + old.run_id : '') : 'the live baseline’s run ' + old.run_id) +
        ', log time axis',
      desc: marks.map((k) => k.label).join(', ') + '. ' + desc.join(' '),
      curves: [old ? { points: old.cdf, name: 'old', old: true, step: old.source === 'histogram' } : null,
        cur ? { points: cur.cdf, name: 'this', step: cur.source === 'histogram' } : null].filter(Boolean),
      marks,
      timeouts,
      caption,
      legend: [
        cur ? ['sw-curve', 'share of this run’s samples at or below a latency'] : null,
        old ? ['sw-old', 'the live baseline’s run (dashed)'] : null,
        cur ? ['sw-p', 'p99 / p999'] : null,
        old ? ['sw-base', 'live p99 / p999'] : null,
        cur ? ['sw-timeout', 'timeout'] : null,
        old ? ['sw-timeout-old', 'live timeout'] : null,
      ].filter(Boolean),
    };
  },

  /** The production plot of one segment at `width` px. */
  svg(seg, width) {
    return this.draw(this.production(seg), width);
  },

  /**
   * A plot at `width` px from its description: {segment, title, desc, height?, curves:
   * [{points, name, old?, step?}] (drawn in order, an `old` one dashed and without area),
   * marks: [{kind, ms, label, foot?}] (labels above the plot, or along its foot), timeouts:
   * [{kind, ms, label, text, slower, note}] (the first at mid-height, a second lower)}.
   */
  draw(plot, width) {
    const curves = plot.curves.map((c) => ({ ...c, points: trimmed(c.points) }));
    const m = this.MARGIN;
    const W = Math.max(260, Math.round(width));
    const H = plot.height || this.HEIGHT;
    const plotW = W - m.left - m.right;
    const plotH = H - m.top - m.bottom;
    const marks = plot.marks;
    const timeouts = plot.timeouts.filter((t) => t.ms > 0);
    const values = curves.flatMap((c) => c.points.map((p) => p[0])).concat(marks.map((k) => k.ms), timeouts.map((t) => t.ms)).filter((v) => v > 0);
    if (!values.length) values.push(1, 1000);
    // the axis spans the 1-2-5 steps around every value, no wider (room for the curve on a phone)
    const lo = step125(Math.min(...values));
    let hi = step125(Math.max(...values) * 1.02, true);
    if (hi <= lo) hi = step125(lo * 2.01, true);
    const x = (ms) => m.left + ((Math.log10(Math.min(Math.max(ms, lo), hi)) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * plotW;
    const y = (share) => m.top + (1 - share) * plotH;
    const id = 'cdf-' + plot.segment.replace(/[^A-Za-z0-9]+/g, '-') + '-' + (++drawn);

    const svg = s('svg', {
      class: 'cdf', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img',
      'aria-labelledby': id + '-title ' + id + '-desc', 'data-segment': plot.segment,
    });
    svg.appendChild(s('title', { id: id + '-title' }, plot.title));
    svg.appendChild(s('desc', { id: id + '-desc' }, plot.desc));

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
      // the last label ends at the plot's edge rather than past it
      const end = t.x + textWidth(t.label) / 2 > W - 2;
      grid.appendChild(s('text', { x: end ? W - 2 : t.x, y: m.top + plotH + 15, class: 'tick', 'text-anchor': end ? 'end' : 'middle' }, t.label));
    }
    grid.appendChild(s('text', { x: m.left + plotW, y: H - 4, class: 'axis-title', 'text-anchor': 'end' }, 'latency (log scale) →'));
    grid.appendChild(s('text', { x: 4, y: 12, class: 'axis-title' }, '↑ share at or below'));
    svg.appendChild(grid);

    // the curves: straight lines between the points, or steps where the points are a
    // histogram's buckets (the share is flat between them, and then 1 up to the axis' end)
    for (const c of curves) {
      if (!c.points.length) continue;
      const pts = [[c.points[0][0], 0]];
      for (const p of c.points) {
        if (c.step) pts.push([p[0], pts[pts.length - 1][1]]);
        pts.push(p);
      }
      if (c.step) pts.push([hi, pts[pts.length - 1][1]]);
      const d = pts.map((p, i) => (i ? 'L' : 'M') + x(p[0]).toFixed(1) + ' ' + y(p[1]).toFixed(1)).join(' ');
      if (!c.old) svg.appendChild(s('path', { d: d + ' L' + x(pts[pts.length - 1][0]).toFixed(1) + ' ' + y(0) + ' Z', class: 'curve-area' }));
      svg.appendChild(s('path', { d, class: c.old ? 'curve curve-old' : 'curve', 'data-curve': c.name }));
    }

    // percentile lines: labels above the plot, or (foot) along its foot, each group in two rows
    // so neighbouring labels never overlap
    const rows = { top: [], foot: [] };
    for (const k of marks.slice().sort((a, b) => a.ms - b.ms)) {
      const xv = x(k.ms);
      const w = textWidth(k.label);
      const foot = Boolean(k.foot);
      let anchor = 'middle';
      let left = xv - w / 2;
      if (foot) {
        // along the foot, to the left of the line (the curve is low there)
        anchor = 'end';
        left = xv - 4 - w;
        if (left < m.left) { anchor = 'start'; left = xv + 4; }
      } else {
        if (left < m.left) { anchor = 'start'; left = xv - 2; }
        if (left + w > W - 2) { anchor = 'end'; left = xv - w + 2; }
      }
      const used = foot ? rows.foot : rows.top;
      let row = used.findIndex((end) => left > end + 6);
      if (row === -1) row = used.length < 2 ? used.length : (used[0] <= used[1] ? 0 : 1);
      used[row] = left + w;
      const ty = foot ? m.top + plotH - 6 - row * 13 : m.top - 8 - row * 13;
      svg.appendChild(s('g', { class: 'mark mark-' + k.kind, 'data-ms': k.ms },
        s('line', { x1: xv, x2: xv, y1: m.top - 2, y2: m.top + plotH }),
        s('text', { x: foot ? (anchor === 'end' ? xv - 4 : xv + 4) : xv, y: ty, 'text-anchor': anchor, class: foot ? 'mark-label base' : 'mark-label' }, k.label)));
    }

    // the timeouts, each with the share of samples slower than it beside it: on the side with
    // room, in as many lines as that room needs. The main one's words at mid-height, where the
    // curve has mostly risen past them; another one's lower, below the main one's last line
    // (above the foot labels). The main one is drawn last (on top).
    const main = timeouts.find((t) => !t.kind.endsWith('old')) || timeouts[0];
    const laid = timeouts.map((t) => {
      const xv = x(t.ms);
      const roomRight = W - m.right - xv - 6;
      const roomLeft = xv - m.left - 4; // not over the share axis' labels
      const one = Math.max(textWidth(t.text, 12), textWidth(t.label, 12));
      let right = roomRight > one + 4;
      let lines = [t.text];
      if (!right && roomLeft <= one + 4) {
        right = roomRight >= roomLeft;
        lines = wrap(t.text, Math.max(roomRight, roomLeft) - 4, 12);
      }
      return { t, xv, lines, right, ty: m.top + plotH * 0.45 };
    });
    const first = laid.find((l) => l.t === main);
    for (const l of laid) {
      if (l !== first) l.ty = Math.max(m.top + plotH * 0.7, first.ty + 15 + 14 * (first.lines.length - 1) + 17);
    }
    for (const { t, xv, lines, right, ty } of laid.filter((l) => l !== first).concat(first ? [first] : [])) {
      const tx = right ? xv + 6 : xv - 6;
      const anchor = right ? 'start' : 'end';
      const words = s('text', { x: tx, y: ty + 15, 'text-anchor': anchor, class: 'timeout-slower' },
        lines.length === 1 ? lines[0] : lines.map((line, i) => s('tspan', { x: tx, dy: i ? 14 : 0 }, line + (i < lines.length - 1 ? ' ' : ''))));
      svg.appendChild(s('g', { class: 'mark mark-' + t.kind, 'data-ms': t.ms, 'data-slower': t.slower },
        s('line', { x1: xv, x2: xv, y1: m.top - 2, y2: m.top + plotH }),
        s('text', { x: tx, y: ty, 'text-anchor': anchor, class: 'timeout-label' }, t.label),
        words,
        s('title', null, t.note)));
    }
    return svg;
  },

  /**
   * The production figure of one segment, drawn at its own width and redrawn when that
   * changes. `track` receives the ResizeObserver, for the page to disconnect on cleanup.
   */
  figure(seg, track) {
    return this.frame(this.production(seg), track);
  },

  /** A figure of any plot description (see `draw`), with its caption and legend. */
  frame(plot, track) {
    const box = h('div', { class: 'cdf-box' });
    const legend = h('ul', { class: 'legend', 'aria-label': 'Legend' },
      plot.legend.map(([swatch, words]) => h('li', null, h('span', { class: 'swatch ' + swatch }), words)));
    const fig = h('figure', { class: 'cdf-figure', 'data-segment': plot.segment }, box, h('figcaption', null, plot.caption, legend));
    let width = 0;
    const draw = (w0) => {
      const w = Math.floor(w0);
      if (!w || Math.abs(w - width) < 2) return;
      width = w;
      box.replaceChildren(this.draw(plot, w));
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
