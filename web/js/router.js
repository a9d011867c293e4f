// router — location.hash → view, with per-view cleanup (polling timers). Signs in and out.

import { caps, session, whenExpired } from './api.js';
import { h } from './dom.js';
import { agents } from './pages/agents.js';
import { alerts } from './pages/alerts.js';
import { baseline } from './pages/baseline.js';
import { chains } from './pages/chains.js';
import { history } from './pages/history.js';
import { production } from './pages/production.js';
import { runs } from './pages/runs.js';
import { signIn } from './pages/signin.js';
import { pageHead, ui } from './ui.js';

function notFound(root) {
  root.appendChild(pageHead('Not found'));
  root.appendChild(ui.note('No page at ' + location.hash + '. '));
  root.appendChild(h('p', null, h('a', { href: '#/' }, 'Back to the chains')));
}

/** One function per page: (root, params, ctx) → renders into root. */
const views = { signIn, chains, runs, production, history, baseline, agents, alerts, notFound };

const routes = [
  { re: /^#?\/?$/, view: 'chains', nav: 'chains' },
  { re: /^#\/chains\/([^/]+)\/runs\/?$/, view: 'runs', nav: 'chains' },
  { re: /^#\/chains\/([^/]+)\/production(?:\/(1m|5m|1h))?\/?$/, view: 'production', nav: 'chains' },
  { re: /^#\/chains\/([^/]+)\/?$/, view: 'history', nav: 'chains' },
  { re: /^#\/baselines\/([^/]+)\/?$/, view: 'baseline', nav: 'chains' },
  { re: /^#\/agents\/?$/, view: 'agents', nav: 'agents' },
  { re: /^#\/alerts\/?$/, view: 'alerts', nav: 'alerts' },
];

export const app = {
  ctx: null,
  pendingFlash: null,
  main: null,

  init() {
    this.main = document.getElementById('main');
    whenExpired((err) => this.expired(err));
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
        // an optional part that did not match stays undefined
        return this.mount(r.view, m.slice(1).map((p) => (p === undefined ? undefined : decodeURIComponent(p))), {});
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
      // what a page may ask of the console: re-render with a message on top, or start over
      flash: (node) => this.flash(node),
      start: () => this.start(),
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
