// budgetd console — vanilla JS, no build step, served by budgetd with a strict CSP (no inline
// script or style: every element is built with DOM calls, every style lives in style.css).
//
// Layout of this file, top to bottom:
//   dom      — element builders (h, s) that never touch innerHTML
//   fmt      — number, percent and time formatting
//   session  — the API token and the detected capabilities (sessionStorage only)
//   api      — fetch wrapper: bearer token, JSON, the {"error":{code,message,details}} shape
//   caps     — role detection by harmless probes (the server still enforces everything)
//   ui       — shared widgets: error box, badges, tables, definition lists
//   drift    — change markers (the server's drift flags highlighted) and a chain's latest-run drift
//   tree     — the call tree drawn to scale as SVG, from the server's numbers
//
// The console computes no rule: findings, drift flags and thresholds, stage needs, inversions
// and budget parts all come from the server (the baseline document, /diff, /tree, the runs'
// vs_live comparison); this file only lays them out.
//   views    — one function per page: signIn, chains, baseline, runs, agents, history
//   router   — location.hash → view, with per-view cleanup (polling timers)
'use strict';

(function () {
  // ---------------------------------------------------------------------------------------
  // dom
  // ---------------------------------------------------------------------------------------
  const SVG_NS = 'http://www.w3.org/2000/svg';

  function append(el, children) {
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      if (Array.isArray(c)) append(el, c);
      else if (c instanceof Node) el.appendChild(c);
      else el.appendChild(document.createTextNode(String(c)));
    }
    return el;
  }

  function setAttrs(el, attrs, isSvg) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (k === 'class') el.setAttribute('class', Array.isArray(v) ? v.filter(Boolean).join(' ') : v);
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (!isSvg && (k === 'disabled' || k === 'hidden' || k === 'required' || k === 'selected' || k === 'checked' || k === 'open')) el[k] = Boolean(v);
      else if (!isSvg && k === 'value') el.value = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    return el;
  }

  /** An HTML element: h('a', {href: '#/'}, 'text', child, [more]). */
  function h(tag, attrs, ...children) {
    return append(setAttrs(document.createElement(tag), attrs, false), children);
  }

  /** An SVG element. */
  function s(tag, attrs, ...children) {
    return append(setAttrs(document.createElementNS(SVG_NS, tag), attrs, true), children);
  }

  const enc = encodeURIComponent;

  // ---------------------------------------------------------------------------------------
  // fmt
  // ---------------------------------------------------------------------------------------
  const fmt = {
    ms(v) {
      if (v === null || v === undefined) return '—';
      const n = Number(v);
      return (Number.isInteger(n) ? String(n) : n.toFixed(n < 10 ? 2 : 1)) + ' ms';
    },
    num(v) {
      return v === null || v === undefined ? '—' : Number(v).toLocaleString('en-US');
    },
    pct(v) {
      if (v === null || v === undefined) return '—';
      const n = Number(v);
      const sign = n > 0 ? '+' : n < 0 ? '−' : '±';
      return sign + Math.abs(n).toFixed(Math.abs(n) >= 100 ? 0 : 1) + ' %';
    },
    time(iso) {
      if (!iso) return '—';
      const d = new Date(iso);
      if (Number.isNaN(d.getTime())) return iso;
      return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
    },
    clock(d) {
      return d.toTimeString().slice(0, 8);
    },
    ago(iso) {
      const t = new Date(iso).getTime();
      if (Number.isNaN(t)) return '';
      const s = Math.max(0, Math.round((Date.now() - t) / 1000));
      if (s < 60) return s + ' s ago';
      if (s < 3600) return Math.round(s / 60) + ' min ago';
      if (s < 86400) return Math.round(s / 3600) + ' h ago';
      return Math.round(s / 86400) + ' d ago';
    },
    rule(r) {
      return { entry: 'entry budget (policy)', pinned: 'pinned by hand', p999_plus30: 'p999 + 30 %', p99_plus10: 'p99 + 10 %' }[r] || r;
    },
    reason(r) {
      return { first_run: 'first run', no_approved_baseline: 'no approved baseline', drift: 'drift', recompute: 'recompute' }[r] || r;
    },
  };

  // ---------------------------------------------------------------------------------------
  // session — the token lives in sessionStorage only (this tab, gone when it closes)
  // ---------------------------------------------------------------------------------------
  const session = {
    TOKEN: 'budgetd.token',
    CAPS: 'budgetd.caps',
    token() {
      return sessionStorage.getItem(this.TOKEN);
    },
    caps() {
      try {
        return JSON.parse(sessionStorage.getItem(this.CAPS) || 'null');
      } catch (_) {
        return null;
      }
    },
    signIn(token, caps) {
      sessionStorage.setItem(this.TOKEN, token);
      sessionStorage.setItem(this.CAPS, JSON.stringify(caps));
    },
    signOut() {
      sessionStorage.removeItem(this.TOKEN);
      sessionStorage.removeItem(this.CAPS);
    },
  };

  // ---------------------------------------------------------------------------------------
  // api
  // ---------------------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, code, message, details) {
      super(message);
      this.status = status;
      this.code = code;
      this.details = details;
    }
  }

  const api = {
    BASE: '/api/v1',
    /**
     * One request. `json` is sent as application/json; `body` as is (with `contentType`).
     * Resolves to the parsed JSON answer; rejects with ApiError (status 0 when unreachable).
     */
    async request(method, path, opts) {
      const o = opts || {};
      const headers = { Accept: 'application/json', Authorization: 'Bearer ' + (o.token || session.token() || '') };
      const init = { method, headers, cache: 'no-store' };
      if (o.json !== undefined) {
        headers['Content-Type'] = 'application/json';
        init.body = JSON.stringify(o.json);
      } else if (o.body !== undefined) {
        headers['Content-Type'] = o.contentType || 'application/octet-stream';
        init.body = o.body;
      }
      let res;
      try {
        res = await fetch(this.BASE + path, init);
      } catch (e) {
        throw new ApiError(0, 'unreachable', 'budgetd could not be reached (' + e.message + ')', null);
      }
      const text = await res.text();
      let data = null;
      if (text) {
        try {
          data = JSON.parse(text);
        } catch (_) {
          data = null;
        }
      }
      if (!res.ok) {
        const e = data && data.error;
        const err = e
          ? new ApiError(res.status, e.code, e.message, e.details)
          : new ApiError(res.status, 'http_' + res.status, res.status + ' ' + res.statusText, null);
        if (res.status === 401 && !o.token) app.expired(err);
        throw err;
      }
      return data;
    },
    get(path) {
      return this.request('GET', path);
    },
    /**
     * A paginated list (`?limit=`, `next_cursor`): the items of `field` of every page, in
     * order, up to `maxPages` pages of 1000. Resolves to { items, more } (`more`: pages were left).
     */
    async getAll(path, field, maxPages) {
      const sep = path.includes('?') ? '&' : '?';
      const items = [];
      let cursor = null;
      for (let page = 0; page < (maxPages || 100); page++) {
        const data = await this.get(path + sep + 'limit=1000' + (cursor ? '&cursor=' + encodeURIComponent(cursor) : ''));
        items.push(...(data[field] || []));
        cursor = data.next_cursor;
        if (!cursor) return { items, more: false };
      }
      return { items, more: true };
    },
    post(path, json) {
      return this.request('POST', path, { json });
    },
  };

  // ---------------------------------------------------------------------------------------
  // caps — what this token may do, from GET /whoami (the server enforces it regardless).
  // Cached in sessionStorage for the session.
  // ---------------------------------------------------------------------------------------
  const caps = {
    async detect(token) {
      const me = await api.request('GET', '/whoami', { token });
      const may = me.may || {};
      const admin = !!may.admin;
      const approve = !!may.approve;
      const upload = !!may.upload;
      const role = admin ? 'admin' : approve ? 'approver' : upload ? 'uploader' : 'read-only';
      return { admin, approve, upload, role, name: me.name };
    },
    current() {
      return session.caps() || { admin: false, approve: false, upload: false, role: 'read-only' };
    },
  };

  // ---------------------------------------------------------------------------------------
  // ui — shared widgets
  // ---------------------------------------------------------------------------------------
  const ui = {
    /** An error from the server, with its code, message and details (violations, findings). */
    error(err, prefix) {
      const msg = err instanceof ApiError ? err.message : String(err && err.message ? err.message : err);
      const box = h('div', { class: 'alert alert-error', role: 'alert' },
        h('strong', null, (prefix ? prefix + ': ' : '') + (err && err.status ? err.status + ' ' + err.code : 'error')),
        ' — ', msg);
      const d = err && err.details;
      if (d && Array.isArray(d.violations) && d.violations.length) {
        box.appendChild(h('ul', null, d.violations.map((v) => h('li', null, h('code', null, v.pointer || '/'), ' ', v.message))));
      }
      if (d && Array.isArray(d.findings) && d.findings.length) {
        box.appendChild(h('ul', null, d.findings.map((f) => h('li', null, f.severity.toUpperCase() + ': ' + f.message))));
      }
      if (d && d.line) box.appendChild(h('p', null, 'line ' + d.line + (d.field ? ', field ' + d.field : '')));
      return box;
    },
    ok(text) {
      return h('div', { class: 'alert alert-ok', role: 'status' }, text);
    },
    note(text) {
      return h('p', { class: 'note' }, text);
    },
    state(state) {
      return h('span', { class: 'badge state-' + state }, state);
    },
    baselineLink(id) {
      return id ? h('a', { href: '#/baselines/' + enc(id), class: 'mono' }, id) : '—';
    },
    /** A table: cols [{label, num?}], rows of cell arrays (or {cells, class}). */
    table(cols, rows, opts) {
      const o = opts || {};
      return h('div', { class: 'table-wrap' },
        h('table', { class: ['data', o.class], id: o.id, 'aria-label': o.label },
          o.caption ? h('caption', null, o.caption) : null,
          h('thead', null, h('tr', null, cols.map((c) => h('th', { scope: 'col', class: c.num ? 'num' : null }, c.label)))),
          h('tbody', null, rows.length
            ? rows.map((r) => {
              const cells = Array.isArray(r) ? r : r.cells;
              return h('tr', { class: Array.isArray(r) ? null : r.class, dataset: Array.isArray(r) ? null : r.data },
                cells.map((c, i) => h(i === 0 && o.rowHeader ? 'th' : 'td', { class: cols[i] && cols[i].num ? 'num' : null, scope: i === 0 && o.rowHeader ? 'row' : null }, c)));
            })
            : h('tr', null, h('td', { colspan: cols.length, class: 'empty' }, o.empty || 'Nothing yet.')))));
    },
    /** A definition list from [term, value] pairs. */
    facts(pairs) {
      return h('dl', { class: 'facts' }, pairs.filter(Boolean).map(([k, v]) => [h('dt', null, k), h('dd', null, v)]));
    },
    section(title, ...children) {
      const id = 'sec-' + title.toLowerCase().replace(/[^a-z0-9]+/g, '-');
      return h('section', { class: 'panel', 'aria-labelledby': id }, h('h2', { id }, title), children);
    },
    /** A timestamp cell: <time>, never wrapped. */
    when(iso) {
      return iso ? h('time', { datetime: iso, title: fmt.ago(iso) }, fmt.time(iso)) : '—';
    },
    loading(text) {
      return h('p', { class: 'loading' }, text || 'Loading…');
    },
    /** Replaces a placeholder's content once a promise settles (errors shown inline). */
    async fill(el, promise, render) {
      try {
        const v = await promise;
        el.replaceChildren(...[].concat(render(v)).filter((x) => x !== null && x !== undefined));
      } catch (e) {
        el.replaceChildren(h('span', { class: 'inline-error', title: e.message }, e.status === 404 ? '—' : 'error: ' + e.message));
      }
    },
  };

  // ---------------------------------------------------------------------------------------
  // drift — change markers and a chain's latest-run drift
  // ---------------------------------------------------------------------------------------
  const drift = {
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

  // ---------------------------------------------------------------------------------------
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
  /** "2 × 44 + 120": a budget's parts as the server took it apart. */
  function budgetParts(b) {
    return b.attempts + ' × ' + b.timeout_ms + (b.backoff_ms ? ' + ' + b.backoff_ms : '');
  }

  const tree = {
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

  // ---------------------------------------------------------------------------------------
  // views
  // ---------------------------------------------------------------------------------------
  const views = {};

  /** Page heading (focused after navigation) and optional sub-navigation. */
  function pageHead(title, sub, crumbs) {
    document.title = title + ' · budgetd';
    return h('header', { class: 'page-head' },
      crumbs ? h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, crumbs) : null,
      h('h1', { tabindex: '-1' }, title),
      sub || null);
  }

  function chainTabs(chain, active) {
    return h('nav', { class: 'tabs', 'aria-label': 'Chain ' + chain },
      h('a', { href: '#/chains/' + enc(chain), 'aria-current': active === 'history' ? 'page' : null }, 'History & audit'),
      h('a', { href: '#/chains/' + enc(chain) + '/runs', 'aria-current': active === 'runs' ? 'page' : null }, 'Runs & upload'));
  }

  // ---- sign in ---------------------------------------------------------------------------
  views.signIn = function (root, _params, ctx) {
    document.title = 'Sign in · budgetd';
    const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'off', spellcheck: 'false', required: true, 'aria-describedby': 'token-help' });
    const msg = h('div', { id: 'signin-msg', 'aria-live': 'polite' });
    if (ctx.message) msg.appendChild(ctx.message);
    const button = h('button', { type: 'submit', class: 'button-primary' }, 'Sign in');
    const form = h('form', {
      id: 'signin-form', class: 'signin',
      onsubmit: async (ev) => {
        ev.preventDefault();
        const token = input.value.trim();
        if (!token) return;
        button.disabled = true;
        msg.replaceChildren(ui.loading('Checking the token…'));
        try {
          await api.request('GET', '/chains', { token });
          const c = await caps.detect(token);
          session.signIn(token, c);
          app.start();
        } catch (e) {
          msg.replaceChildren(e.status === 401
            ? ui.error(e, 'This token was not accepted')
            : ui.error(e, 'Sign-in failed'));
          button.disabled = false;
          input.focus();
        }
      },
    },
    h('h1', { tabindex: '-1' }, 'Sign in to budgetd'),
    h('label', { for: 'token' }, 'API token'),
    input,
    h('p', { id: 'token-help', class: 'help' }, 'Paste a token created with “budgetctl token create” (or the admin token). It is kept in this browser tab only (sessionStorage) and sent only to this server. What you may do is learned from the server; it still checks every action.'),
    button,
    msg);
    root.appendChild(form);
    input.focus();
  };

  // ---- chains overview -------------------------------------------------------------------
  views.chains = async function (root) {
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
          h('span', null, fmt.num(c.runs), ' ', h('a', { href: '#/chains/' + chainQ + '/runs', class: 'sub' }, 'runs & upload')),
        ],
      };
    });
    root.appendChild(ui.table([
      { label: 'Chain' }, { label: 'Current baseline' }, { label: 'Pending drafts' }, { label: 'Latest run vs live' },
      { label: 'Rollout' }, { label: 'Archive' }, { label: 'Runs' },
    ], rows, { id: 'chains-table', label: 'Chains', rowHeader: true }));
  };

  // ---- baseline --------------------------------------------------------------------------
  views.baseline = async function (root, [id]) {
    const idQ = enc(id);
    const doc = await api.get('/baselines/' + idQ);
    const c = caps.current();
    const chainQ = enc(doc.chain);
    const errors = doc.findings.filter((f) => f.severity === 'error');
    const [diff, run, numbers] = await Promise.all([
      api.get('/baselines/' + idQ + '/diff?against=current').catch((e) => ({ error: e })),
      api.get('/chains/' + chainQ + '/runs/' + enc(doc.run_id)).catch(() => null),
      api.get('/baselines/' + idQ + '/tree').catch(() => null),
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
    if (c.approve) decision.appendChild(approvePanel(doc, errors, run));

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
        { label: 'Segment' }, { label: 'Class' }, { label: 'p99', num: true }, { label: 'p999', num: true }, { label: 'Rule' },
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
    ui.fill(rollout, api.get('/baselines/' + idQ + '/rollout'), (r) => ui.facts([
      ['Revision', r.revision === null ? 'never published' : String(r.revision)],
      ['Acked', r.acked + ' of ' + r.agents + ' agents'],
      ['Connected', String(r.connected)],
      ['NACKed', r.nacked ? h('strong', { class: 'text-error' }, String(r.nacked)) : '0'],
    ]));
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
  };

  /** Approve / reject form. Disabled up front when the server would refuse for sure. */
  function approvePanel(doc, errors, run) {
    const reasons = [];
    let rejectBlocked = false;
    if (doc.state !== 'draft') {
      reasons.push('This baseline is ' + doc.state + '; only a draft can be approved or rejected.');
      rejectBlocked = true;
    }
    if (errors.length) {
      reasons.push('Approval is blocked by ' + errors.length + ' error finding' + (errors.length > 1 ? 's' : '') + ': ' +
        errors.map((f) => f.check + ' on ' + f.segment).join(', ') + '. Fix the topology or the run and recompute; rejecting is still possible.');
    }
    const approveBlocked = reasons.length > 0;
    const comment = h('textarea', { id: 'decision-comment', name: 'comment', rows: 3, maxlength: 4096, 'aria-describedby': 'decision-help' });
    const msg = h('div', { id: 'decision-msg', 'aria-live': 'polite' });
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
          const res = await api.post('/baselines/' + enc(doc.id) + '/' + action, { comment: text || null });
          const done = action === 'approve'
            ? 'Approved ' + doc.id + ' — published as revision ' + res.revision + (res.superseded ? ', superseding ' + res.superseded : '') + '.'
            : 'Rejected ' + doc.id + '.';
          app.flash(ui.ok(done));
        } catch (e) {
          msg.replaceChildren(ui.error(e, e.status === 403 ? 'The server refused' : action === 'approve' ? 'Approval failed' : 'Rejection failed'));
          approveBtn.disabled = approveBlocked;
          rejectBtn.disabled = rejectBlocked;
        }
      },
    },
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

  // ---- runs ------------------------------------------------------------------------------
  const FORMATS = [
    ['auto', 'Detect automatically'],
    ['native', 'native JSON (budgetd run document)'],
    ['locust', 'Locust *_stats.csv'],
    ['oha', 'oha JSON'],
    ['k6', 'k6 summary JSON'],
    ['jmeter', 'JMeter JTL CSV'],
    ['hdrhistogram', 'HdrHistogram interval log (.hlog)'],
    ['wrk2', 'wrk2 --latency output'],
  ];

  /** Whether a file is budgetd's native run JSON (an object with "segments"). */
  async function looksNative(file) {
    if (file.size > 8 * 1024 * 1024) return false;
    try {
      const v = JSON.parse(await file.text());
      return Boolean(v) && typeof v === 'object' && !Array.isArray(v) && Array.isArray(v.segments);
    } catch (_) {
      return false;
    }
  }

  views.runs = async function (root, [chain]) {
    const chainQ = enc(chain);
    root.appendChild(pageHead('Runs of ' + chain, chainTabs(chain, 'runs'), [h('a', { href: '#/' }, 'Chains'), ' / ', h('a', { href: '#/chains/' + chainQ }, chain), ' / runs']));
    const c = caps.current();
    const [topo, list] = await Promise.all([
      api.get('/chains/' + chainQ + '/topology').catch(() => null),
      api.get('/chains/' + chainQ + '/runs?limit=20'),
    ]);
    const segmentIds = topo ? topo.topology.segments.map((x) => x.id) : [];
    const result = h('div', { id: 'upload-result', 'aria-live': 'polite' });
    const listBox = h('div', { id: 'runs-list' });

    if (c.upload) root.appendChild(uploadForm(chain, segmentIds, result, () => reloadList()));
    else root.appendChild(ui.note('Your token cannot upload runs (uploader or admin role needed).'));
    root.appendChild(result);
    root.appendChild(ui.section('Recent runs', listBox));

    const renderList = (runs) => listBox.replaceChildren(ui.table(
      [{ label: 'Run' }, { label: 'Uploaded' }, { label: 'By' }, { label: 'Format' }, { label: 'Tool' }, { label: 'Topology' }, { label: 'Percentiles' }],
      runs.map((r) => [
        h('span', { class: 'mono' }, r.id), ui.when(r.created_at), r.uploaded_by, r.format, r.tool || '—', 'v' + r.topology_version,
        h('details', null, h('summary', null, r.segments.length + ' segments'), percentileTable(r.segments)),
      ]), { id: 'runs-table', label: 'Runs', rowHeader: true, empty: 'No runs yet.' }));
    const reloadList = async () => {
      try {
        renderList((await api.get('/chains/' + chainQ + '/runs?limit=20')).runs);
      } catch (e) {
        listBox.replaceChildren(ui.error(e));
      }
    };
    renderList(list.runs);
  };

  function percentileTable(segments) {
    return ui.table([{ label: 'Segment' }, { label: 'Samples', num: true }, { label: 'Failures', num: true }, { label: 'p50', num: true }, { label: 'p99', num: true }, { label: 'p999', num: true }],
      segments.map((x) => [h('span', { class: 'mono' }, x.id), fmt.num(x.samples), fmt.num(x.failures), fmt.ms(x.p50_ms), fmt.ms(x.p99_ms), fmt.ms(x.p999_ms)]),
      { label: 'Percentiles', rowHeader: true, class: 'compact' });
  }

  function uploadForm(chain, segmentIds, result, onDone) {
    const file = h('input', { id: 'run-file', name: 'file', type: 'file', required: true });
    const format = h('select', { id: 'run-format', name: 'format' }, FORMATS.map(([v, t]) => h('option', { value: v }, t)));
    const unit = h('select', { id: 'run-unit', name: 'unit', 'aria-describedby': 'run-unit-help' },
      h('option', { value: '' }, '— (not needed)'), ['ns', 'us', 'ms', 's'].map((u) => h('option', { value: u }, u)));
    const label = h('input', { id: 'run-label', name: 'label', type: 'text', 'aria-describedby': 'run-label-help' });
    const mapRows = h('div', { class: 'map-rows', id: 'map-rows' });
    let rowSeq = 0;
    const addRow = () => {
      const n = ++rowSeq;
      const lab = h('input', { id: 'map-label-' + n, type: 'text', class: 'map-label' });
      const seg = h('select', { id: 'map-segment-' + n, class: 'map-segment' }, h('option', { value: '' }, '— choose a segment —'), segmentIds.map((x) => h('option', { value: x }, x)));
      const row = h('div', { class: 'map-row' },
        h('label', { for: 'map-label-' + n }, 'Tool label'), lab,
        h('span', { 'aria-hidden': 'true' }, '→'),
        h('label', { for: 'map-segment-' + n }, 'Segment'), seg,
        h('button', { type: 'button', class: 'button-quiet', onclick: () => { row.remove(); addBtn.focus(); }, 'aria-label': 'Remove mapping row ' + n }, 'Remove'));
      mapRows.appendChild(row);
      lab.focus();
    };
    const addBtn = h('button', { type: 'button', id: 'map-add', class: 'button-quiet', onclick: addRow }, '+ Add a label mapping');
    const submit = h('button', { type: 'submit', id: 'upload', class: 'button-primary' }, 'Upload run');

    const form = h('form', {
      id: 'upload-form', class: 'upload',
      onsubmit: async (ev) => {
        ev.preventDefault();
        const f = file.files && file.files[0];
        if (!f) return;
        const q = new URLSearchParams();
        let contentType = 'application/octet-stream';
        if (format.value === 'native') {
          q.set('format', 'native');
          contentType = 'application/json';
        } else if (format.value === 'auto') {
          if (await looksNative(f)) contentType = 'application/json';
        } else {
          q.set('format', format.value);
        }
        if (unit.value) q.set('unit', unit.value);
        if (label.value.trim()) q.set('label', label.value.trim());
        const map = {};
        for (const row of mapRows.querySelectorAll('.map-row')) {
          const l = row.querySelector('.map-label').value.trim();
          const sg = row.querySelector('.map-segment').value;
          if (l && sg) map[l] = sg;
        }
        if (Object.keys(map).length) q.set('map', JSON.stringify(map));
        submit.disabled = true;
        result.replaceChildren(ui.loading('Uploading ' + f.name + ' (' + fmt.num(f.size) + ' bytes)…'));
        try {
          const qs = q.toString();
          const res = await api.request('POST', '/chains/' + enc(chain) + '/runs' + (qs ? '?' + qs : ''), { body: f, contentType });
          result.replaceChildren(uploadResult(res));
          onDone();
        } catch (e) {
          result.replaceChildren(ui.error(e, 'Upload refused'));
        } finally {
          submit.disabled = false;
        }
      },
    },
    h('div', { class: 'field' }, h('label', { for: 'run-file' }, 'Load-test file'), file),
    h('div', { class: 'field' }, h('label', { for: 'run-format' }, 'Format'), format),
    h('div', { class: 'field' }, h('label', { for: 'run-unit' }, 'Unit'), unit, h('p', { id: 'run-unit-help', class: 'help' }, 'Required for HdrHistogram logs.')),
    h('div', { class: 'field' }, h('label', { for: 'run-label' }, 'Label (optional)'), label, h('p', { id: 'run-label-help', class: 'help' }, 'For single-endpoint tools (oha, wrk2): the label of the file’s endpoint.')),
    h('fieldset', { class: 'mapping' }, h('legend', null, 'Label mapping (optional: tool label → segment; wins over the topology’s labels)'), mapRows, addBtn),
    h('div', { class: 'buttons' }, submit));
    return ui.section('Upload a run', form);
  }

  function uploadResult(res) {
    const parts = [];
    parts.push(ui.ok('Stored run ' + res.run_id + ' (' + res.format + (res.tool ? ', ' + res.tool : '') + ').' +
      (res.baseline_id ? ' A draft was created (' + fmt.reason(res.reason) + ').' : ' No draft: no drift from the live baseline.')));
    parts.push(ui.facts([
      ['Run', h('span', { class: 'mono', id: 'result-run-id' }, res.run_id)],
      ['Draft', res.baseline_id ? h('a', { href: '#/baselines/' + enc(res.baseline_id), id: 'result-draft', class: 'mono' }, 'Open draft ' + res.baseline_id) : 'none'],
      ['Compared with', res.compared_to ? ui.baselineLink(res.compared_to) : 'no approved baseline'],
      ['Topology', 'v' + res.topology_version],
      res.findings && res.findings.length ? ['Draft findings', h('ul', { class: 'findings' }, res.findings.map((f) => h('li', null, f.severity.toUpperCase() + ': ' + f.message)))] : null,
    ]));
    if (res.mapping) {
      const m = res.mapping;
      parts.push(h('h3', null, 'Label mapping'));
      parts.push(ui.facts([
        ['Mapped', Object.keys(m.mapped || {}).length ? Object.entries(m.mapped).map(([l, sg]) => h('div', null, h('code', null, l), ' → ', h('code', null, sg))) : 'none'],
        ['Unmapped (not used)', m.unmapped && m.unmapped.length ? h('span', { class: 'text-warn' }, m.unmapped.join(', ')) : 'none'],
        m.ignored && m.ignored.length ? ['Ignored', m.ignored.join(', ')] : null,
      ]));
    }
    parts.push(h('h3', null, 'Parsed percentiles'));
    parts.push(percentileTable(res.segments || []));
    parts.push(h('h3', null, 'Drift report'));
    if (!res.comparison || !res.comparison.length) {
      parts.push(ui.note('Nothing compared: the chain has no approved baseline.'));
    } else {
      const over = res.drift_threshold_pct + ' %';
      parts.push(ui.note(res.drift.length ? res.drift.length + ' percentile(s) moved more than ' + over + ' from ' + res.compared_to + ': drift.' : 'No percentile moved more than ' + over + ' from ' + res.compared_to + '.'));
      parts.push(ui.table([{ label: 'Segment' }, { label: 'Metric' }, { label: 'Live baseline', num: true }, { label: 'This run', num: true }, { label: 'Change' }, { label: 'Drift' }],
        res.comparison.map((d) => ({
          class: d.drift ? 'row-big-change' : null,
          cells: [h('span', { class: 'mono' }, d.segment), d.metric, fmt.ms(d.baseline_ms), fmt.ms(d.run_ms),
            h('span', { class: ['change', d.drift ? 'change-big' : null] }, drift.marker(d.change_pct)),
            d.drift ? h('strong', null, 'DRIFT') : 'no'],
        })), { id: 'drift-table', label: 'Drift report', rowHeader: true }));
    }
    return h('section', { class: 'panel result', 'aria-labelledby': 'result-title' }, h('h2', { id: 'result-title' }, 'Upload result'), parts);
  }

  // ---- agents ----------------------------------------------------------------------------
  views.agents = async function (root, _params, ctx) {
    const status = h('p', { class: 'live', id: 'agents-status', 'aria-live': 'off' }, 'Loading…');
    const box = h('div', { id: 'agents' });
    root.appendChild(pageHead('Agents', h('p', { class: 'lead' }, 'Every agent seen: the service, the chains it receives, the replica it streams from, the revisions delivered and acknowledged, and refusals (NACK). Refreshed every 2 s while this page is open.')));
    root.appendChild(status);
    root.appendChild(box);
    const render = (agents) => box.replaceChildren(ui.table(
      [{ label: 'Agent' }, { label: 'Service' }, { label: 'Chains' }, { label: 'Replica' }, { label: 'Connected' },
        { label: 'Delivered', num: true }, { label: 'Acked', num: true }, { label: 'NACK' }, { label: 'Last seen' }],
      agents.map((a) => ({
        data: { agent: a.agent_id },
        class: a.nack_revision ? 'row-nack' : null,
        cells: [
          h('span', { class: 'mono' }, a.agent_id), a.service,
          a.chains.map((ch, i) => [i ? ', ' : '', h('a', { href: '#/chains/' + enc(ch) }, ch)]),
          h('span', { class: 'mono' }, a.replica),
          a.connected ? h('span', { class: 'badge badge-ok' }, 'connected') : h('span', { class: 'badge' }, 'offline'),
          h('span', { class: 'delivered' }, String(a.delivered)),
          h('span', { class: a.acked < a.delivered ? 'text-warn' : null }, String(a.acked)),
          a.nack_revision ? h('span', { class: 'text-error' }, 'NACK rev ' + a.nack_revision + ': ' + (a.nack_error || '')) : '—',
          h('span', { title: a.last_seen }, fmt.ago(a.last_seen)),
        ],
      })), { id: 'agents-table', label: 'Agents', rowHeader: true, empty: 'No agent has connected yet.' }));

    let timer = null;
    const poll = async () => {
      try {
        const { items: agents, more } = await api.getAll('/agents', 'agents', 10);
        if (!ctx.alive) return;
        render(agents);
        status.textContent = (more ? 'First ' : '') + agents.length + ' agent' + (agents.length === 1 ? '' : 's') + ' · live, updated ' + fmt.clock(new Date());
        status.classList.remove('text-error');
      } catch (e) {
        if (!ctx.alive) return;
        status.textContent = 'Update failed (' + e.message + '); retrying every 2 s';
        status.classList.add('text-error');
      }
      if (ctx.alive) timer = setTimeout(poll, 2000);
    };
    ctx.onCleanup(() => clearTimeout(timer));
    await poll();
  };

  // ---- history ---------------------------------------------------------------------------
  views.history = async function (root, [chain]) {
    const chainQ = enc(chain);
    root.appendChild(pageHead('History of ' + chain, chainTabs(chain, 'history'), [h('a', { href: '#/' }, 'Chains'), ' / ', chain]));
    const c = caps.current();
    const [live, list, audit] = await Promise.all([
      api.get('/chains/' + chainQ + '/budgets').catch((e) => (e.status === 404 ? null : Promise.reject(e))),
      api.getAll('/chains/' + chainQ + '/baselines', 'baselines').then(({ items }) => ({ baselines: items })),
      api.get('/audit?chain=' + chainQ + '&limit=50'),
    ]);
    root.appendChild(h('p', { id: 'live', class: 'live-box' }, live
      ? [h('strong', null, 'Live: '), ui.baselineLink(live.baseline_id), ' · revision ' + live.revision + ' · published ' + fmt.time(live.published_at)]
      : 'Nothing published yet: approve a draft to go live.'));

    const msg = h('div', { id: 'rollback-msg', 'aria-live': 'polite' });
    const rows = list.baselines.map((b) => {
      let action = '—';
      if (b.state === 'superseded' && c.approve) action = rollbackControl(chain, b, msg);
      else if (b.state === 'draft') action = h('a', { href: '#/baselines/' + enc(b.id) }, 'review');
      return {
        data: { baseline: b.id, state: b.state },
        cells: [ui.baselineLink(b.id), ui.state(b.state), fmt.reason(b.reason), h('span', { class: 'mono' }, b.run_id), 'v' + b.topology_version,
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
  };

  function detailText(d) {
    if (d === null || d === undefined) return '—';
    if (typeof d !== 'object') return String(d);
    const parts = Object.entries(d).filter(([, v]) => v !== null && v !== undefined).map(([k, v]) => k + ': ' + (typeof v === 'object' ? JSON.stringify(v) : v));
    return parts.length ? h('span', { class: 'detail' }, parts.join(' · ')) : '—';
  }

  /** "Roll back" → inline confirmation → POST /chains/{c}/rollback. */
  function rollbackControl(chain, b, msg) {
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
            app.flash(ui.ok('Rolled back ' + r.chain + ' to ' + r.baseline_id + ': live as revision ' + r.revision + (r.superseded ? ', superseding ' + r.superseded : '') + '.'));
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

  // ---------------------------------------------------------------------------------------
  // router
  // ---------------------------------------------------------------------------------------
  const routes = [
    { re: /^#?\/?$/, view: 'chains', nav: 'chains' },
    { re: /^#\/chains\/([^/]+)\/runs\/?$/, view: 'runs', nav: 'chains' },
    { re: /^#\/chains\/([^/]+)\/?$/, view: 'history', nav: 'chains' },
    { re: /^#\/baselines\/([^/]+)\/?$/, view: 'baseline', nav: 'chains' },
    { re: /^#\/agents\/?$/, view: 'agents', nav: 'agents' },
  ];

  const app = {
    ctx: null,
    pendingFlash: null,
    main: null,

    init() {
      this.main = document.getElementById('main');
      window.addEventListener('hashchange', () => this.route());
      document.getElementById('sign-out').addEventListener('click', () => {
        session.signOut();
        this.start();
      });
      const skip = document.querySelector('.skip-link');
      if (skip) {
        skip.addEventListener('click', (ev) => {
          ev.preventDefault();
          const target = this.main.querySelector('h1') || this.main;
          target.focus();
        });
      }
      this.start();
    },

    /** Signed in → route; otherwise the sign-in form. */
    start(message) {
      const signedIn = Boolean(session.token() && session.caps());
      document.getElementById('nav').hidden = !signedIn;
      document.getElementById('whoami').hidden = !signedIn;
      if (signedIn) {
        const c = caps.current();
        const can = ['read'].concat(c.upload ? ['upload'] : [], c.approve ? ['approve', 'roll back'] : [], c.admin ? ['manage tokens'] : []);
        const role = document.getElementById('role');
        role.textContent = 'Signed in · ' + c.role + ' (may ' + can.join(', ') + ')';
        role.dataset.role = c.role;
        this.route();
      } else {
        this.mount('signIn', [], message ? { message } : {});
      }
    },

    /** Any 401 from the API: the token was revoked or is wrong. */
    expired(err) {
      session.signOut();
      this.start(ui.error(err, 'Signed out: the server no longer accepts this token'));
    },

    route() {
      if (!session.token()) return this.start();
      const hash = location.hash || '#/';
      for (const r of routes) {
        const m = hash.match(r.re);
        if (m) {
          for (const a of document.querySelectorAll('[data-nav]')) {
            if (a.dataset.nav === r.nav) a.setAttribute('aria-current', 'page');
            else a.removeAttribute('aria-current');
          }
          return this.mount(r.view, m.slice(1).map(decodeURIComponent), {});
        }
      }
      this.mount('notFound', [], {});
    },

    /** Re-renders the current page with a message on top (after approve, reject, rollback). */
    flash(node) {
      this.pendingFlash = node;
      this.route();
    },

    /** Runs a view in a fresh container; the previous view's timers are cleaned up. */
    async mount(name, params, extra) {
      if (this.ctx) this.ctx.cleanup();
      const cleanups = [];
      const ctx = Object.assign({
        alive: true,
        onCleanup: (fn) => cleanups.push(fn),
        cleanup() {
          this.alive = false;
          cleanups.forEach((fn) => fn());
        },
      }, extra);
      this.ctx = ctx;
      const flash = this.pendingFlash;
      this.pendingFlash = null;
      const root = h('div', { class: 'view view-' + name });
      const loading = ui.loading();
      this.main.replaceChildren(flash || '', loading, root);
      root.setAttribute('aria-busy', 'true');
      try {
        await views[name](root, params, ctx);
        if (!ctx.alive) return;
        root.dataset.ready = 'true';
        if (name !== 'signIn') {
          const h1 = root.querySelector('h1');
          if (h1 && (document.activeElement === document.body || !document.activeElement)) h1.focus({ preventScroll: true });
        }
      } catch (e) {
        if (!ctx.alive || (e && e.status === 401)) return;
        root.appendChild(ui.error(e, 'Could not load this page'));
        root.dataset.ready = 'error';
      } finally {
        loading.remove();
        root.removeAttribute('aria-busy');
      }
    },
  };

  views.notFound = function (root) {
    root.appendChild(pageHead('Not found'));
    root.appendChild(ui.note('No page at ' + location.hash + '. '));
    root.appendChild(h('p', null, h('a', { href: '#/' }, 'Back to the chains')));
  };

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', () => app.init());
  else app.init();
})();
