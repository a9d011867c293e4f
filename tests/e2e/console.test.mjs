// End-to-end test of the budgetd web console in a real headless browser (Debian chromium driven
// by playwright-core). It starts its own budgetd on free ports with a throwaway data directory,
// sets the scene through the HTTP API, and then does in the browser what people do: upload a
// run, review and approve a draft (as another person), watch the agent fleet update live, roll
// back, and check that an inverted draft cannot be approved and a reader is offered nothing.
//
// Run from the repository root (binaries built with `cargo build --bins`):
//
//   node --test tests/e2e/console.test.mjs
//
// Environment:
//   BUDGETD_BIN        budgetd binary (default target/debug/budgetd, relative to the repo root)
//   BUDGETCTL_BIN      budgetctl binary (default: next to BUDGETD_BIN)
//   CHROMIUM_BIN       browser (default /usr/bin/chromium)
//   E2E_WEB_FROM_DISK  1 = serve web/ from disk instead of the copy embedded in the binary, with
//                      the same CSP (to iterate on the console without rebuilding budgetd)
//
// Screenshots (1440×900 viewport, full page) go to target/console-screenshots/; when every step
// passed they are copied to docs/console-<page>.png.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFile } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const BIN = path.resolve(REPO, process.env.BUDGETD_BIN || 'target/debug/budgetd');
const CTL = path.resolve(REPO, process.env.BUDGETCTL_BIN || path.join(path.dirname(BIN), 'budgetctl'));
const CHROMIUM = process.env.CHROMIUM_BIN || '/usr/bin/chromium';
const EXAMPLES = path.join(REPO, 'schemas', 'examples');
const SHOTS = path.join(REPO, 'target', 'console-screenshots');
const DOCS = path.join(REPO, 'docs');
// budgetd refuses short, low-variety and placeholder admin tokens: a random one, as in production.
const ADMIN = crypto.randomBytes(32).toString('hex');
const STEP_TIMEOUT = 60_000;
const UI_TIMEOUT = 15_000;

const example = (name) => JSON.parse(fs.readFileSync(path.join(EXAMPLES, name), 'utf8'));

/** A port nobody listens on right now. */
function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The server under test: process, URLs, log. */
const server = { proc: null, log: '', base: '', grpc: '', dataDir: '' };

async function startServer() {
  const [httpPort, grpcPort] = [await freePort(), await freePort()];
  server.dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'budgetd-e2e-'));
  server.base = `http://127.0.0.1:${httpPort}`;
  server.grpc = `http://127.0.0.1:${grpcPort}`;
  // Only our own settings: a BUDGETD_* variable from the caller's shell (say a database URL)
  // must not leak into the server under test.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('BUDGETD_')));
  env.BUDGETD_ADMIN_TOKEN = ADMIN;
  env.RUST_LOG = env.RUST_LOG || 'warn';
  server.proc = spawn(BIN, ['serve', '--data-dir', server.dataDir, '--http', `127.0.0.1:${httpPort}`, '--grpc', `127.0.0.1:${grpcPort}`], {
    cwd: REPO, env, stdio: ['ignore', 'pipe', 'pipe'],
  });
  let exited = null;
  server.proc.on('exit', (code, signal) => { exited = { code, signal }; });
  for (const s of [server.proc.stdout, server.proc.stderr]) s.on('data', (d) => { server.log += d.toString(); });
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (exited) throw new Error(`budgetd exited (${JSON.stringify(exited)}):\n${server.log}`);
    try {
      const res = await fetch(server.base + '/healthz');
      if (res.ok) return;
    } catch (_) { /* not up yet */ }
    await sleep(100);
  }
  throw new Error('budgetd did not answer /healthz within 30 s:\n' + server.log);
}

function stopServer() {
  if (server.proc && server.proc.exitCode === null && server.proc.signalCode === null) {
    server.proc.kill('SIGTERM');
    const p = server.proc;
    setTimeout(() => { if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL'); }, 3000).unref();
  }
}
process.on('exit', () => { if (server.proc && server.proc.exitCode === null) server.proc.kill('SIGKILL'); });

/** A call to the HTTP API; throws with the server's error unless the status is expected. */
async function api(method, route, token, body, expect = [200, 201]) {
  const headers = { Authorization: 'Bearer ' + token };
  let payload;
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    payload = typeof body === 'string' ? body : JSON.stringify(body);
  }
  const res = await fetch(server.base + '/api/v1' + route, { method, headers, body: payload });
  const text = await res.text();
  const data = text ? JSON.parse(text) : null;
  if (!expect.includes(res.status)) throw new Error(`${method} ${route} → ${res.status}: ${text}`);
  return data;
}

function run(cmd, args, opts) {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: 60_000, ...opts }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${cmd} ${args.join(' ')} failed: ${err.message}\n${stdout}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

// ---------------------------------------------------------------------------------------------
// browser
// ---------------------------------------------------------------------------------------------
const browser = { ctx: null, userDataDir: '', problems: [] };

async function startBrowser() {
  browser.userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'budgetd-e2e-chromium-'));
  browser.ctx = await chromium.launchPersistentContext(browser.userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
    viewport: { width: 1440, height: 900 },
    timeout: 30_000,
  });
  browser.ctx.setDefaultTimeout(UI_TIMEOUT);
  if (process.env.E2E_WEB_FROM_DISK === '1') await serveWebFromDisk(browser.ctx);
}

/** Development aid: the console files from web/ with the CSP of src/http/console.rs. */
async function serveWebFromDisk(ctx) {
  const csp = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'";
  const files = { '/': ['index.html', 'text/html; charset=utf-8'], '/console': ['index.html', 'text/html; charset=utf-8'],
    '/assets/style.css': ['style.css', 'text/css; charset=utf-8'] };
  // the entry module and every module it imports (web/js/**)
  for (const f of ['app.js', ...fs.readdirSync(path.join(REPO, 'web', 'js'), { recursive: true }).map((p) => 'js/' + p.split(path.sep).join('/'))]) {
    if (f.endsWith('.js')) files['/assets/' + f] = [f, 'text/javascript; charset=utf-8'];
  }
  await ctx.route((url) => url.origin === server.base && Object.hasOwn(files, url.pathname), (route) => {
    const [file, type] = files[new URL(route.request().url()).pathname];
    route.fulfill({ status: 200, headers: { 'content-type': type, 'content-security-policy': csp, 'cache-control': 'no-cache' },
      body: fs.readFileSync(path.join(REPO, 'web', file)) });
  });
}

/** A new tab (its own sessionStorage, so its own signed-in user). */
async function newTab(name) {
  const page = await browser.ctx.newPage();
  page.on('pageerror', (e) => browser.problems.push(`[${name}] page error: ${e.message}`));
  page.on('console', (m) => {
    if (/Content Security Policy|Refused to/i.test(m.text())) browser.problems.push(`[${name}] ${m.text()}`);
  });
  return page;
}

async function signIn(page, token, role) {
  await page.goto(server.base + '/');
  await page.locator('#token').fill(token);
  await page.keyboard.press('Enter'); // a real <form>: Enter submits
  await page.locator('#role').filter({ hasText: role }).waitFor();
  await page.locator('main .view[data-ready]').waitFor();
}

/** Navigates within the single-page console and waits for the view to finish loading. */
async function open(page, hash) {
  await page.evaluate((h) => { location.hash = h; }, hash);
  await page.waitForFunction((h) => {
    const v = document.querySelector('main .view');
    return location.hash === h && v && v.dataset.ready;
  }, hash, { timeout: UI_TIMEOUT });
  const state = await page.locator('main .view').getAttribute('data-ready');
  if (state !== 'true') throw new Error(`${hash} failed to load: ${await page.locator('main').innerText()}`);
}

async function shot(page, name) {
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, `console-${name}.png`), fullPage: true });
}

// ---------------------------------------------------------------------------------------------
// the scenario
// ---------------------------------------------------------------------------------------------
describe('budgetd console', { timeout: 10 * 60_000 }, () => {
  const tokens = {};
  const ids = {};
  const tabs = {};

  before(async () => {
    for (const f of [BIN, CTL, CHROMIUM]) assert.ok(fs.existsSync(f), `${f} is missing (cargo build --bins; apt-get install chromium)`);
    await startServer();
    for (const [role, name] of [['uploader', 'uma'], ['approver', 'abe'], ['agent', 'order-1'], ['reader', 'rita']]) {
      tokens[role] = (await api('POST', '/tokens', ADMIN, { role, name })).token;
    }
    await api('PUT', '/chains/checkout/topology', tokens.uploader, example('checkout-topology.json'));
    await startBrowser();
  });

  after(async () => {
    try {
      if (browser.ctx) await browser.ctx.close();
    } finally {
      stopServer();
      for (const d of [browser.userDataDir, server.dataDir]) {
        if (d) fs.rmSync(d, { recursive: true, force: true, maxRetries: 3 });
      }
    }
  });

  it('the uploader signs in and uploads run A on the Runs page', { timeout: STEP_TIMEOUT }, async () => {
    const page = tabs.uploader = await newTab('uploader');
    await signIn(page, tokens.uploader, 'uploader');
    assert.match(await page.locator('#role').innerText(), /uploader/);
    await page.locator('#chains-table tbody tr[data-chain="checkout"]').waitFor();

    await open(page, '#/chains/checkout/runs');
    await page.locator('#run-file').setInputFiles(path.join(EXAMPLES, 'checkout-run-a.json'));
    assert.equal(await page.locator('#run-format').inputValue(), 'auto');
    await page.locator('#upload').click();
    const draft = page.locator('#result-draft');
    await draft.waitFor();
    ids.first = (await draft.innerText()).match(/bl-\d{8}-\d+/)[0];
    ids.firstRun = (await page.locator('#result-run-id').innerText()).trim();
    const result = await page.locator('#upload-result').innerText();
    assert.match(result, /first run/);
    assert.match(result, /Parsed percentiles/);
    assert.match(result, /order->payment[\s\S]*210 ms[\s\S]*300 ms/);
    // the new run is listed without a reload
    await page.locator('#runs-table tbody tr', { hasText: ids.firstRun }).waitFor();
    await shot(page, 'runs');

    await draft.click();
    await page.waitForFunction((id) => location.hash === '#/baselines/' + id, ids.first);
    await page.locator('.view-baseline[data-ready="true"]').waitFor();
    await page.locator('svg.tree').waitFor();
    assert.equal(await page.locator('svg.tree g.row-seg').count(), 4);
    assert.match(await page.locator('#findings').innerText(), /No findings/);
    assert.match(await page.locator('figcaption').innerText(), /no inversion/);
    const inventory = await page.locator('#segments-table tr[data-segment="order->inventory"]').innerText();
    assert.match(inventory, /44 ms/);
    assert.match(inventory, /208 ms/);
    assert.match(await page.locator('svg.tree').textContent(), /need 607 of 800 ms available/);
    // an uploader may not approve: nothing is offered
    assert.equal(await page.locator('#approve').count(), 0);
    assert.match(await page.locator('#archive').innerText(), new RegExp(`gov/bench/\\d{4}-\\d{2}-\\d{2}/${ids.first}\\.json`));
  });

  it('the approver (a second person) approves the draft with the keyboard', { timeout: STEP_TIMEOUT }, async () => {
    const page = tabs.approver = await newTab('approver');
    await signIn(page, tokens.approver, 'approver');
    await open(page, '#/baselines/' + ids.first);
    const approve = page.locator('#approve');
    await approve.waitFor();
    assert.equal(await approve.isEnabled(), true);
    await page.locator('#decision-comment').focus();
    await page.keyboard.type('load test 2026-11-30, reviewed');
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate(() => document.activeElement.id), 'approve');
    await page.keyboard.press('Enter');
    await page.locator('.alert-ok', { hasText: `Approved ${ids.first}` }).waitFor();
    assert.match(await page.locator('.alert-ok').innerText(), /published as revision 1/);
    await page.locator('.view-baseline[data-ready="true"]').waitFor();
    assert.match(await page.locator('.page-head').innerText(), /approved/);
    assert.match(await page.locator('.area-decision').innerText(), /reviewed/);
    // no longer a draft: the buttons stay, disabled, with the reason
    assert.equal(await page.locator('#approve').isDisabled(), true);
    assert.match(await page.locator('#decision-reason').innerText(), /only a draft/);
    await shot(page, 'baseline');
  });

  it('four eyes: the server refuses an approval by the run’s uploader, and the page says why', { timeout: STEP_TIMEOUT }, async () => {
    await api('PUT', '/chains/checkout-eu/topology', ADMIN, example('checkout-topology.json'));
    const up = await api('POST', '/chains/checkout-eu/runs', ADMIN, example('checkout-run-a.json'));
    const page = tabs.admin = await newTab('admin');
    await signIn(page, ADMIN, 'admin');
    await open(page, '#/baselines/' + up.baseline_id);
    await page.locator('#approve').click();
    const msg = page.locator('#decision-msg [role="alert"]');
    await msg.waitFor();
    assert.match(await msg.innerText(), /403 forbidden[\s\S]*four eyes/);
    assert.equal(await page.locator('#approve').isEnabled(), true);
    await page.close();
  });

  it('a load-tool file (Locust CSV) uploads with label-mapping rows', { timeout: STEP_TIMEOUT }, async () => {
    const page = tabs.uploader;
    await open(page, '#/chains/checkout-eu/runs');
    await page.locator('#run-file').setInputFiles(path.join(REPO, 'tests', 'fixtures', 'locust', 'shop_stats.csv'));
    await page.locator('#run-format').selectOption('locust');
    for (const label of ['inventory', 'payment', 'user']) {
      await page.locator('#map-add').click();
      const row = page.locator('#map-rows .map-row').last();
      await row.locator('.map-label').fill(label);
      await row.locator('.map-segment').selectOption('order->' + label);
    }
    await page.locator('#upload').click();
    await page.locator('#result-run-id').waitFor();
    const result = await page.locator('#upload-result').innerText();
    assert.match(result, /locust/);
    assert.match(result, /inventory\s*→\s*order->inventory/);
    assert.match(result, /Ignored\s*Aggregated/);
    assert.match(result, /order->payment\s*419\s*18/); // samples and failures as Locust counted them
    await shot(page, 'runs-locust');
  });

  it('the Agents page shows the fleet and updates live', { timeout: STEP_TIMEOUT }, async () => {
    const page = tabs.approver;
    await open(page, '#/agents');
    await page.locator('#agents-status', { hasText: 'live' }).waitFor();
    await page.evaluate(() => { window.__e2eNoReload = true; });
    // two Watch streams on a chain of their own, one approval while they listen, then exit
    const out = await run(CTL, ['--token', ADMIN, 'bench', 'watch', '--subscribers', '2', '--rounds', '1', '--url', server.base, '--grpc', server.grpc]);
    assert.match(out, /streams: 2/);
    const rows = page.locator('#agents-table tbody tr[data-agent^="bench-"]');
    await page.waitForFunction(() => document.querySelectorAll('#agents-table tbody tr[data-agent^="bench-"]').length === 2, null, { timeout: 10_000 });
    for (const text of await rows.allInnerTexts()) assert.match(text, /bench/);
    const delivered = await rows.locator('.delivered').allInnerTexts();
    assert.ok(delivered.every((d) => Number(d) >= 1), `delivered revisions: ${delivered}`);
    assert.equal(await page.evaluate(() => window.__e2eNoReload), true, 'the page was reloaded');
    // and it keeps polling: the status line's timestamp moves on
    const before = await page.locator('#agents-status').innerText();
    await page.waitForFunction((b) => document.querySelector('#agents-status').innerText !== b, before, { timeout: 6_000 });
    await shot(page, 'agents');
  });

  it('a drift draft shows its > 20 % change; after approving it, a rollback on the History page goes live', { timeout: STEP_TIMEOUT }, async () => {
    const up = await api('POST', '/chains/checkout/runs', tokens.uploader, example('checkout-run-c-drift.json'));
    assert.equal(up.reason, 'drift');
    ids.drift = up.baseline_id;
    const page = tabs.approver;
    await open(page, '#/baselines/' + ids.drift);
    const payment = page.locator('#segments-table tr[data-segment="order->payment"]');
    assert.match(await payment.getAttribute('class'), /row-big-change/);
    assert.match(await payment.innerText(), /▲ \+30\.0 %/);
    assert.equal(await page.locator('#segments-table tr[data-segment="order->user"]').getAttribute('class'), null);
    await page.locator('#approve').click();
    await page.locator('.alert-ok', { hasText: `Approved ${ids.drift}` }).waitFor();

    await open(page, '#/chains/checkout');
    assert.match(await page.locator('#live').innerText(), new RegExp(`Live: ${ids.drift} · revision \\d+`));
    const row = page.locator(`#baselines-table tr[data-baseline="${ids.first}"]`);
    assert.equal(await row.getAttribute('data-state'), 'superseded');
    await row.locator('.rollback-start').click();
    await row.locator('.rollback-confirm').click();
    await page.locator('.alert-ok', { hasText: `Rolled back checkout to ${ids.first}` }).waitFor();
    await page.locator('#live', { hasText: `Live: ${ids.first} · revision` }).waitFor();
    assert.equal(await page.locator(`#baselines-table tr[data-baseline="${ids.first}"]`).getAttribute('data-state'), 'approved');
    assert.equal(await page.locator(`#baselines-table tr[data-baseline="${ids.drift}"]`).getAttribute('data-state'), 'superseded');
    assert.match(await page.locator('#audit-table').innerText(), /chain\.rollback/);
    await shot(page, 'history');
  });

  it('an inverted draft cannot be approved from the page, and the tree says INVERTED', { timeout: STEP_TIMEOUT }, async () => {
    await api('PUT', '/chains/checkout/topology', tokens.uploader, example('checkout-topology-b-inverted.json'));
    const doc = await api('POST', '/chains/checkout/baselines', tokens.uploader, { run_id: ids.firstRun });
    ids.inverted = doc.id;
    const page = tabs.approver;
    await open(page, '#/baselines/' + ids.inverted);
    const approve = page.locator('#approve');
    await approve.waitFor();
    assert.equal(await approve.isDisabled(), true);
    const reason = page.locator('#decision-reason');
    assert.equal(await reason.isVisible(), true);
    assert.match(await reason.innerText(), /Cannot approve[\s\S]*inversion on gateway->order/);
    assert.equal(await approve.getAttribute('aria-describedby'), 'decision-reason');
    assert.match(await page.locator('svg.tree').textContent(), /INVERTED: 109 ms over/);
    assert.ok(await page.locator('svg.tree .row-need.inverted').count() >= 1);
    assert.ok(await page.locator('svg.tree .over').count() >= 1);
    assert.match(await page.locator('#findings').innerText(), /children of gateway->order need 909 ms/);
    await shot(page, 'baseline-inverted');
    // at other widths too (for a look, not for docs/)
    for (const width of [1280, 1920]) {
      await page.setViewportSize({ width, height: 900 });
      await page.screenshot({ path: path.join(SHOTS, `console-baseline-inverted-${width}.png`), fullPage: true });
    }
    await page.setViewportSize({ width: 1440, height: 900 });
  });

  it('a reader is offered no approve, reject, rollback or upload', { timeout: STEP_TIMEOUT }, async () => {
    const page = tabs.reader = await newTab('reader');
    await signIn(page, tokens.reader, 'read-only');
    await open(page, '#/baselines/' + ids.inverted);
    await page.locator('svg.tree').waitFor();
    assert.equal(await page.locator('#approve').count(), 0);
    assert.equal(await page.locator('#reject').count(), 0);
    assert.equal(await page.locator('#decision-form').count(), 0);
    await open(page, '#/chains/checkout');
    assert.equal(await page.locator('.rollback-start').count(), 0);
    await open(page, '#/chains/checkout/runs');
    assert.equal(await page.locator('#upload-form').count(), 0);
    await page.close();
  });

  it('the chains overview shows baselines, drafts, drift, rollout and archive', { timeout: STEP_TIMEOUT }, async () => {
    const page = tabs.approver;
    await open(page, '#/');
    await page.waitForFunction(() => {
      const t = document.querySelector('#chains-table');
      return t && !/…/.test(t.innerText);
    });
    const checkout = await page.locator('#chains-table tr[data-chain="checkout"]').innerText();
    assert.match(checkout, new RegExp(ids.first));
    assert.match(checkout, new RegExp(ids.inverted));
    assert.match(checkout, /\d+\/\d+ acked/);
    assert.match(checkout, /archived/);
    // the latest run is C (payment p999 390 ms) and the live baseline is A again (300 ms)
    assert.match(checkout, /▲ \+30\.0 %[\s\S]*order->payment p999[\s\S]*DRIFT/);
    await shot(page, 'chains');
  });

  it('no CSP violation or script error happened, and the screenshots are copied to docs/', () => {
    assert.deepEqual(browser.problems, []);
    fs.mkdirSync(DOCS, { recursive: true });
    for (const name of ['chains', 'runs', 'baseline', 'baseline-inverted', 'agents', 'history']) {
      fs.copyFileSync(path.join(SHOTS, `console-${name}.png`), path.join(DOCS, `console-${name}.png`));
    }
  });
});
