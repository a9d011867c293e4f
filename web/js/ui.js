// ui — shared widgets: error box, badges, tables, definition lists, a live page's refresh, the
// page heading and a chain's tabs.

import { ApiError } from './api.js';
import { enc, h } from './dom.js';
import { fmt } from './format.js';

export const ui = {
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
  /**
   * A table: cols [{label, num?}], rows of cell arrays (or {cells, class}). `stack`: on narrow
   * screens each row becomes a block of "label value" lines instead of a wide row.
   */
  table(cols, rows, opts) {
    const o = opts || {};
    return h('div', { class: 'table-wrap' },
      h('table', { class: ['data', o.class, o.stack ? 'stack' : null], id: o.id, 'aria-label': o.label },
        o.caption ? h('caption', null, o.caption) : null,
        h('thead', null, h('tr', null, cols.map((c) => h('th', { scope: 'col', class: c.num ? 'num' : null }, c.label)))),
        h('tbody', null, rows.length
          ? rows.map((r) => {
            const cells = Array.isArray(r) ? r : r.cells;
            return h('tr', { class: Array.isArray(r) ? null : r.class, dataset: Array.isArray(r) ? null : r.data },
              cells.map((c, i) => h(i === 0 && o.rowHeader ? 'th' : 'td', { class: cols[i] && cols[i].num ? 'num' : null, scope: i === 0 && o.rowHeader ? 'row' : null, 'data-label': o.stack && cols[i] ? cols[i].label : null }, c)));
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
  /**
   * Runs `update` now, then every `everyMs` while the page is open. The first run's error is
   * the page's (thrown); a later one is shown in `status` (which `update` resets when it
   * succeeds), and the next try comes as usual.
   */
  async refresh(ctx, status, everyMs, update) {
    let timer = null;
    const load = async (first) => {
      try {
        await update();
      } catch (e) {
        if (first) throw e;
        if (!ctx.alive) return;
        status.textContent = 'Update failed (' + e.message + '); retrying every ' + everyMs / 1000 + ' s';
        status.classList.add('text-error');
      }
      if (ctx.alive) timer = setTimeout(() => load(false), everyMs);
    };
    ctx.onCleanup(() => clearTimeout(timer));
    await load(true);
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

/** Page heading (focused after navigation) and optional sub-navigation. */
export function pageHead(title, sub, crumbs) {
  document.title = title + ' · budgetd';
  return h('header', { class: 'page-head' },
    crumbs ? h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, crumbs) : null,
    h('h1', { tabindex: '-1' }, title),
    sub || null);
}

export function chainTabs(chain, active) {
  return h('nav', { class: 'tabs', 'aria-label': 'Chain ' + chain },
    h('a', { href: '#/chains/' + enc(chain), 'aria-current': active === 'history' ? 'page' : null }, 'History & audit'),
    h('a', { href: '#/chains/' + enc(chain) + '/runs', 'aria-current': active === 'runs' ? 'page' : null }, 'Runs & upload'),
    h('a', { href: '#/chains/' + enc(chain) + '/production', 'aria-current': active === 'production' ? 'page' : null }, 'Production'));
}
