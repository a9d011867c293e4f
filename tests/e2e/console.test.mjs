// End-to-end test of the budgetd web console in a real headless browser (Debian chromium driven
// by playwright-core). It starts its own budgetd on free ports with a throwaway data directory,
// sets the scene through the HTTP API, and then does in the browser what people do: upload a
// run, review and approve a draft (as another person), watch the agent fleet update live, roll
// back, and check that an inverted draft cannot be approved and a reader is offered nothing.
// Then agents report production figures (gRPC Report, written by hand in report.mjs): the
// Production page shows them per segment with each latency distribution against its timeout
// (at 1440 and 390 px), an amplification alert fires and resolves on the Alerts page, and
// budgetctl shows the same figures and delivers the alert to a signed webhook. Last, a JMeter
// run whose 100 ms pinned timeout kills 25 % of inventory's load test: the baseline page plots
// the distribution against the timeout with the server's kill rate, next to the live baseline's
// (the diff view), and approval is blocked by the timeout_kill_rate finding.
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
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { latencies, report, watch } from './report.mjs';

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
// Rollups of 5 s instead of a minute, so the production windows 1m, 5m and 1h span 5 s, 25 s and
// 300 s, and alert rules are evaluated twice a second: an alert fires and resolves within seconds.
const ROLLUP_MS = 5_000;

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
  env.BUDGETD_FEEDBACK__ROLLUP_MS = String(ROLLUP_MS);
  env.BUDGETD_FEEDBACK__EVALUATE_EVERY_MS = '500';
  env.RUST_LOG = env.RUST_LOG || 'warn,budgetd::service::feedback=info';
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

/** Polls `probe` until it answers something truthy; throws after `ms`. */
async function until(what, probe, ms) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(200);
  }
}

// The console's number formats (web/js/format.js), to compare the page with the API's numbers.
const fmtMs = (v) => (v === null || v === undefined ? '—' : (Number.isInteger(v) ? String(v) : v.toFixed(v < 10 ? 2 : 1)) + ' ms');
const fmtShare = (n) => (n === 0 ? '0 %' : n < 0.0001 ? '<0.01 %' : n < 1 && n > 0.9999 ? '>99.99 %' : (n * 100).toFixed(n < 0.01 ? 2 : 1) + ' %');

// web/js/format.js's kill rate (as budgetctl writes it): up to two decimals, trailing zeros dropped.
const fmtKill = (n) => (n > 0 && n < 0.00005 ? '<0.01 %' : String(Number((n * 100).toFixed(2))) + ' %');

/**
 * A JMeter JTL (CSV with a header) of `samples` ({label: [[ms, count], …]}), rows interleaved
 * across labels as threads write them.
 */
function jtl(samples) {
  const rows = ['timeStamp,elapsed,label,responseCode,responseMessage,threadName,dataType,success,bytes,grpThreads,allThreads,Latency'];
  const values = Object.entries(samples).map(([label, spec]) => [label, spec.flatMap(([ms, n]) => Array(n).fill(ms))]);
  const longest = Math.max(...values.map(([, v]) => v.length));
  let ts = 1_796_023_259_711;
  for (let i = 0; i < longest; i++) {
    for (const [label, v] of values) {
      if (i < v.length) rows.push(`${++ts},${v[i]},${label},200,OK,Shop 1-1,text,true,176,2,2,${v[i]}`);
    }
  }
  return rows.join('\n') + '\n';
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

/** The upload form's label mapping: exactly inventory, payment, user → order->… (rows a previous upload left are removed). */
async function mapEndpoints(page) {
  const rows = page.locator('#map-rows .map-row');
  while (await rows.count()) await rows.first().locator('button').click();
  for (const label of ['inventory', 'payment', 'user']) {
    await page.locator('#map-add').click();
    const row = rows.last();
    await row.locator('.map-label').fill(label);
    await row.locator('.map-segment').selectOption('order->' + label);
  }
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

  it('the sign-in page offers no Sign out, before signing in and after signing out', { timeout: STEP_TIMEOUT }, async () => {
    const page = await newTab('signin');
    await page.goto(server.base + '/');
    await page.locator('#signin-form').waitFor();
    assert.equal(await page.locator('#sign-out').isVisible(), false);
    assert.equal(await page.locator('#whoami').isVisible(), false);
    await signIn(page, tokens.reader, 'read-only');
    assert.equal(await page.locator('#sign-out').isVisible(), true);
    await page.locator('#sign-out').click();
    await page.locator('#signin-form').waitFor();
    assert.equal(await page.locator('#sign-out').isVisible(), false);
    assert.equal(await page.locator('#nav').isVisible(), false);
    await page.close();
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
    // the new run is listed without a reload, linked to the draft it opened
    const listed = page.locator(`#runs-table tbody tr[data-run="${ids.firstRun}"]`);
    await listed.waitFor();
    assert.match(await listed.locator('.run-draft').innerText(), new RegExp(`${ids.first}\\s*draft`));
    assert.equal(await listed.locator(`.run-draft a[href="#/baselines/${ids.first}"]`).count(), 1);
    assert.match(await listed.locator('.run-drift').innerText(), /no live baseline/);
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
    // samples and failures per segment (run A gives no failures: unknown, never 0)
    assert.match(inventory, /100,000/);
    assert.match(inventory, /unknown/);
    assert.match(await page.locator('svg.tree').textContent(), /need 607 of 800 ms available/);
    // an uploader may not approve: nothing is offered, and the page says whom it waits for
    assert.equal(await page.locator('#approve').count(), 0);
    assert.equal(await page.locator('#waiting').innerText(), 'Waiting for an approver (not you: you uploaded this run).');
    assert.match(await page.locator('#archive').innerText(), new RegExp(`gov/bench/\\d{4}-\\d{2}-\\d{2}/${ids.first}\\.json`));
  });

  it('before any agent reports, the Production and Alerts pages show their empty states', { timeout: STEP_TIMEOUT }, async () => {
    const page = tabs.uploader;
    await open(page, '#/chains/checkout');
    // reachable from the chain's tabs
    await page.locator('.tabs a', { hasText: 'Production' }).click();
    await page.locator('.view-production[data-ready="true"]').waitFor();
    assert.equal(await page.evaluate(() => location.hash), '#/chains/checkout/production');
    assert.equal(await page.locator('.tabs a[aria-current="page"]').innerText(), 'Production');
    assert.match(await page.locator('#production-empty').innerText(), /No agent reported calls of checkout/);
    assert.equal(await page.locator('#window-select a[aria-current="page"]').innerText(), '5m');
    assert.match(await page.locator('#production-status').innerText(), /Window 5m: .* · no approved baseline to compare with/);
    await page.locator('#window-select a[data-window="1h"]').click();
    await page.waitForFunction(() => location.hash === '#/chains/checkout/production/1h');
    // the 5m view stays ready until the route mounts the 1h one: wait for the 1h view itself
    await page.locator('.view-production[data-ready="true"]:has(#window-select a[data-window="1h"][aria-current="page"]) #production-empty').waitFor();
    assert.match(await page.locator('#production-status').innerText(), /Window 1h/);
    assert.equal(await page.locator('svg.cdf').count(), 0);
    await page.locator('#nav a[data-nav="alerts"]').click();
    await page.locator('.view-alerts[data-ready="true"]').waitFor();
    assert.equal(await page.locator('#nav a[aria-current="page"]').innerText(), 'Alerts');
    assert.match(await page.locator('#alerts-firing').innerText(), /No alert is firing/);
    assert.match(await page.locator('#alerts-resolved').innerText(), /No alert has resolved yet/);
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
    ids.euAdmin = up.baseline_id;
    await open(page, '#/baselines/' + up.baseline_id);
    // disabled up front, with the reason, as for an inverted draft; rejecting stays possible
    const approve = page.locator('#approve');
    await approve.waitFor();
    assert.equal(await approve.isDisabled(), true);
    assert.equal(await approve.getAttribute('aria-describedby'), 'decision-reason');
    assert.match(await page.locator('#decision-reason').innerText(), /Cannot approve[\s\S]*Four eyes: you uploaded this run \(run-\d{8}-\d+\), so another person must approve it/);
    assert.equal(await page.locator('#reject').isEnabled(), true);
    assert.equal(await page.locator('#decision-msg [role="alert"]').count(), 0, 'nothing was sent');
    await page.close();
  });

  it('a load-tool file (Locust CSV) uploads with label-mapping rows', { timeout: STEP_TIMEOUT }, async () => {
    const page = tabs.uploader;
    await open(page, '#/chains/checkout-eu/runs');
    await page.locator('#run-file').setInputFiles(path.join(REPO, 'tests', 'fixtures', 'locust', 'shop_stats.csv'));
    await page.locator('#run-format').selectOption('locust');
    await mapEndpoints(page);
    await page.locator('#upload').click();
    await page.locator('#result-run-id').waitFor();
    const result = await page.locator('#upload-result').innerText();
    assert.match(result, /locust/);
    assert.match(result, /inventory\s*→\s*order->inventory/);
    assert.match(result, /Ignored\s*Aggregated/);
    assert.match(result, /order->payment\s*419\s*18/); // samples and failures as Locust counted them
    await shot(page, 'runs-locust');
  });

  it('several files (one oha file per endpoint) upload as one run, and the draft they open supersedes the older one', { timeout: STEP_TIMEOUT }, async () => {
    const page = tabs.uploader;
    await open(page, '#/chains/checkout-eu/runs');
    const oha = ['inventory', 'payment', 'user'].map((e) => path.join(REPO, 'tests', 'fixtures', 'oha', e + '.json'));
    await page.locator('#run-file').setInputFiles(oha);
    await page.locator('#run-format').selectOption('oha');
    // one label per file, the file name by default
    assert.deepEqual(await page.locator('#file-labels .file-label').evaluateAll((els) => els.map((e) => e.value)), ['inventory', 'payment', 'user']);
    await mapEndpoints(page);
    await page.locator('#upload').click();
    await page.locator('#result-run-id').waitFor();
    const result = await page.locator('#upload-result').innerText();
    assert.match(result, /oha/);
    for (const label of ['inventory', 'payment', 'user']) assert.match(result, new RegExp(`${label}\\s*→\\s*order->${label}`));
    const runId = (await page.locator('#result-run-id').innerText()).trim();
    const run = await api('GET', '/chains/checkout-eu/runs/' + runId, tokens.reader);
    assert.deepEqual(run.sources.map((x) => x.name).sort(), ['inventory', 'payment', 'user']);
    const draft = (await page.locator('#result-draft').innerText()).match(/bl-\d{8}-\d+/)[0];
    await page.locator(`#runs-table tbody tr[data-run="${runId}"] .run-draft a[href="#/baselines/${draft}"]`).waitFor();
    await shot(page, 'runs-multi');

    // the admin's earlier draft of checkout-eu was superseded by newer ones: not approvable
    const approver = tabs.approver;
    await open(approver, '#/baselines/' + ids.euAdmin);
    assert.match(await approver.locator('.page-head').innerText(), /superseded/);
    assert.match(await approver.locator('#superseded-by').innerText(), /Replaced by the newer draft bl-\d{8}-\d+ before any decision/);
    assert.equal(await approver.locator('#approve').isDisabled(), true);
    assert.match(await approver.locator('#decision-reason').innerText(), /A newer draft \(bl-\d{8}-\d+\) replaced this one/);
    assert.equal(await approver.locator('#reject').isDisabled(), true);
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
    ids.driftRun = up.run_id;
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
    // when and how it became live again
    assert.match(await page.locator('#live').innerText(), /live again since \d{4}-\d{2}-\d{2} [\d:]+ UTC by a rollback \(abe\)/);
    assert.equal(await page.locator(`#baselines-table tr[data-baseline="${ids.first}"]`).getAttribute('data-state'), 'approved');
    assert.equal(await page.locator(`#baselines-table tr[data-baseline="${ids.drift}"]`).getAttribute('data-state'), 'superseded');
    assert.match(await page.locator('#audit-table').innerText(), /chain\.rollback/);
    await shot(page, 'history');
    // the baseline page's rollout says so too
    await open(page, '#/baselines/' + ids.first);
    await page.locator('#published-how', { hasText: 'by a rollback' }).waitFor();
    // the runs page: run C opened the drift draft (superseded by the rollback) and drifts from the live A
    await open(page, '#/chains/checkout/runs');
    const runC = page.locator(`#runs-table tbody tr[data-run="${ids.driftRun}"]`);
    assert.match(await runC.locator('.run-draft').innerText(), new RegExp(`${ids.drift}\\s*superseded`));
    assert.match(await runC.locator('.run-drift').innerText(), new RegExp(`▲ \\+30\\.0 % order->payment p999 vs ${ids.first} DRIFT`));
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

  it('agents’ reports show on the Production page: figures next to the live baseline, and each segment’s latency against its timeout', { timeout: STEP_TIMEOUT }, async () => {
    // what the agents of checkout saw 30 s ago (outside the 25 s of the rules' 5m window): the
    // live baseline's percentiles, except payment 30 % slower
    const live = await api('GET', '/baselines/' + ids.first, tokens.reader);
    const now = Date.now();
    const windows = live.segments.map((seg) => {
      const slow = seg.id === 'order->payment' ? 1.3 : 1;
      const retried = seg.id === 'order->inventory' ? 600 : 0;
      return {
        chain: 'checkout', segment: seg.id, startMs: now - 30_000, endMs: now - 29_000,
        calls: 2000, attempts: 2000 + retried, retries: { deadline: retried }, outcomes: { ok: 1996, business_error: 4 },
        latenciesUs: latencies(2000, { p50: seg.p99_ms * 0.5 * slow, p99: seg.p99_ms * slow, p999: seg.p999_ms * slow, maxMs: seg.p999_ms * 1.1 * slow }),
      };
    });
    const accepted = await report(server.grpc, tokens.agent, 'e2e-order-1', windows);
    assert.equal(accepted, windows.length, 'budgetd skipped report windows:\n' + server.log.split('\n').filter((l) => /report windows/.test(l)).join('\n'));
    const prod = await api('GET', '/chains/checkout/production?window=1h', tokens.reader);
    assert.equal(prod.baseline_id, ids.first);
    assert.deepEqual(prod.segments.map((x) => x.segment).sort(), live.segments.map((x) => x.id).sort());
    const payment = prod.segments.find((x) => x.segment === 'order->payment');
    assert.equal(payment.drift, true, 'payment 30 % slower than the baseline is drift');

    const page = tabs.approver;
    await open(page, '#/chains/checkout/production/1h');
    assert.match(await page.locator('#production-status').innerText(), new RegExp(`Window 1h: .* compared with the live baseline ${ids.first}`));
    await page.waitForFunction((n) => document.querySelectorAll('svg.cdf').length === n, prod.segments.length);
    for (const seg of prod.segments) {
      const row = page.locator(`#production-table tr[data-segment="${seg.segment}"]`);
      const text = await row.innerText();
      for (const v of [fmtMs(seg.p99_ms), 'baseline ' + fmtMs(seg.baseline_p99_ms), fmtMs(seg.p999_ms), 'baseline ' + fmtMs(seg.baseline_p999_ms), fmtMs(seg.timeout_ms)]) {
        assert.ok(text.includes(v), `${seg.segment}: ${v} missing from ${JSON.stringify(text)}`);
      }
      assert.equal(seg.drift, /DRIFT/.test(text), `${seg.segment}: the server's drift flag`);
      assert.equal(seg.drift, (await row.getAttribute('class') || '').includes('row-big-change'));
      // the plot: the timeout line and the share of samples slower than it, read off the
      // distribution (one minus the share at the last point at or below the timeout)
      const plot = page.locator(`svg.cdf[data-segment="${seg.segment}"]`);
      assert.equal(Number(await plot.locator('.mark-timeout').getAttribute('data-ms')), seg.timeout_ms);
      const below = seg.distribution.filter(([ms]) => ms <= seg.timeout_ms).pop();
      const slower = 1 - (below ? below[1] : 0);
      assert.equal(await plot.locator('.timeout-slower').textContent(), fmtShare(slower) + ' slower than the timeout');
      assert.equal(Number(await plot.locator('.mark-p99').getAttribute('data-ms')), seg.p99_ms);
      assert.equal(Number(await plot.locator('.mark-p999').getAttribute('data-ms')), seg.p999_ms);
      assert.equal(Number(await plot.locator('.mark-base-p999').getAttribute('data-ms')), seg.baseline_p999_ms);
      assert.ok((await plot.locator('path.curve').getAttribute('d')).split('L').length > 10, 'the curve has its points');
    }
    // a stable segment's timeout (p99 + 10 %) lies below its p999: some samples are slower
    const inventory = page.locator('svg.cdf[data-segment="order->inventory"] .mark-timeout');
    assert.ok(Number(await inventory.getAttribute('data-slower')) > 0);
    assert.match(await page.locator('section.prod-segment[data-segment="order->inventory"]').innerText(), /Amplification\s*1\.3×[\s\S]*Kill rate\s*23\.1 %/);
    assert.match(await page.locator('section.prod-segment[data-segment="order->payment"] h2').innerText(), /DRIFT \+\d+\.\d %/);
    await shot(page, 'production');

    // a phone: nothing wider than the screen, each plot redrawn at the width it has
    await page.setViewportSize({ width: 390, height: 844 });
    await page.waitForFunction(() => [...document.querySelectorAll('svg.cdf')].every((svg) => Number(svg.getAttribute('width')) <= 366));
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth) <= 390, 'the page scrolls sideways at 390 px');
    assert.equal(await page.locator('section.prod-segment[data-segment="order->payment"] .timeout-slower').count(), 1);
    await page.screenshot({ path: path.join(SHOTS, 'console-production-390.png'), fullPage: true });
    await page.setViewportSize({ width: 1440, height: 900 });
  });

  it('an amplification alert fires once and resolves once: the Alerts page, budgetctl and a signed webhook show its numbers', { timeout: 2 * STEP_TIMEOUT }, async () => {
    // a webhook receiver, registered with budgetctl (the secret from the environment)
    const received = [];
    const receiver = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c) => { body += c; });
      req.on('end', () => { received.push({ headers: req.headers, body }); res.end('ok'); });
    });
    await new Promise((r) => receiver.listen(0, '127.0.0.1', r));
    const secret = crypto.randomBytes(24).toString('hex');
    const ctl = (args, env) => run(CTL, ['--url', server.base, '--token', ADMIN, ...args], { env: { ...process.env, ...env } });
    try {
      const added = await ctl(['webhook', 'add', `http://127.0.0.1:${receiver.address().port}/hook`, '--event', 'alert.firing', '--event', 'alert.resolved'],
        { BUDGETD_WEBHOOK_SECRET: secret });
      const hook = added.match(/^webhook:\s+(wh-\S+)$/m)[1];
      assert.match(added, /events:\s+alert\.firing, alert\.resolved/);
      assert.match(await ctl(['webhook', 'list']), new RegExp(hook));

      // one rollup where order->user made 3 attempts per call: fires once it is complete
      await report(server.grpc, tokens.agent, 'e2e-order-1', [{ chain: 'checkout', segment: 'order->user', startMs: Date.now(), endMs: Date.now() + 100,
        calls: 100, attempts: 300, retries: { unavailable: 200 }, outcomes: { ok: 100 } }]);
      const firing = await until('the amplification alert', async () => (await api('GET', '/alerts?state=firing', tokens.reader)).alerts
        .find((a) => a.rule === 'amplification' && a.segment === 'order->user'), 4 * ROLLUP_MS);
      assert.deepEqual([firing.chain, firing.value, firing.threshold], ['checkout', 3, 2]);
      const page = tabs.approver;
      await open(page, '#/alerts');
      const row = page.locator(`#alerts-firing tr[data-alert="${firing.id}"]`);
      assert.match(await row.innerText(), /Retry amplification[\s\S]*checkout[\s\S]*order->user[\s\S]*3×[\s\S]*2×/);
      assert.match(await page.locator('#alerts-status').innerText(), /[1-9]\d* firing/);
      // the Production page names it too
      await open(page, '#/chains/checkout/production/1h');
      assert.match(await page.locator('#production-alerts').innerText(), /firing on checkout[\s\S]*Retry amplification on order->user \(3×\)/);

      // a later rollup at 1×: resolved
      await report(server.grpc, tokens.agent, 'e2e-order-1', [{ chain: 'checkout', segment: 'order->user', startMs: Date.now(), endMs: Date.now() + 100,
        calls: 100, attempts: 100, retries: {}, outcomes: { ok: 100 } }]);
      await until('the alert to resolve', async () => (await api('GET', '/alerts', tokens.reader)).alerts
        .find((a) => a.id === firing.id && a.state === 'resolved'), 4 * ROLLUP_MS);
      await open(page, '#/alerts');
      const resolved = page.locator(`#alerts-resolved tr[data-alert="${firing.id}"]`);
      assert.match(await resolved.innerText(), /Retry amplification[\s\S]*3×[\s\S]*2×[\s\S]*UTC[\s\S]*UTC/);
      assert.equal(await page.locator(`#alerts-firing tr[data-alert="${firing.id}"]`).count(), 0);
      await resolved.locator('details summary').click();
      assert.match(await resolved.locator('details').innerText(), /counts\.attempts\s*300[\s\S]*window\s*1m/);
      await shot(page, 'alerts');
      await page.setViewportSize({ width: 390, height: 844 });
      assert.ok(await page.evaluate(() => document.documentElement.scrollWidth) <= 390, 'the Alerts page scrolls sideways at 390 px');
      await page.screenshot({ path: path.join(SHOTS, 'console-alerts-390.png'), fullPage: true });
      await page.setViewportSize({ width: 1440, height: 900 });

      // budgetctl: the same alert and figures
      const alerts = await ctl(['alerts']);
      assert.match(alerts, new RegExp(`│ +${firing.id} ┆ amplification +┆ checkout +┆ order->user +┆ resolved +┆ 3× vs 2× `));
      assert.doesNotMatch(await ctl(['alerts', '--firing']), new RegExp(`│ +${firing.id} ┆`));
      const figures = await ctl(['production', '--chain', 'checkout', '--window', '1h']);
      assert.match(figures, new RegExp(`baseline: ${ids.first} \\(live\\)`));
      assert.match(figures, /│ order->payment +┆[^\n]*┆ yes \+\d+\.\d % /);
      assert.match(figures, /│ order->inventory +┆ +2000 ┆ +2600 ┆ +1\.3× ┆ +23\.1 % /);

      // the webhook got both events, signed with the secret
      const events = await until('both webhook deliveries', async () => {
        const mine = received.map((r) => ({ ...r, json: JSON.parse(r.body) })).filter((r) => r.json.alert && r.json.alert.id === firing.id);
        return mine.length >= 2 ? mine : null;
      }, 20_000);
      assert.deepEqual(events.map((e) => e.json.event).sort(), ['alert.firing', 'alert.resolved']);
      for (const e of events) {
        const expect = 'sha256=' + crypto.createHmac('sha256', secret).update(e.body).digest('hex');
        assert.equal(e.headers['x-budgetd-signature'], expect);
        assert.deepEqual([e.json.alert.value, e.json.alert.threshold], [3, 2]);
      }
      await until('the delivery log', async () => (await api('GET', `/webhooks/${hook}/deliveries`, ADMIN)).deliveries
        .filter((d) => d.state === 'delivered').length >= 2, 10_000);
      assert.match(await ctl(['webhook', 'deliveries', hook]), /alert\.resolved +┆ delivered +┆ +1 ┆ HTTP 200 /);
      assert.match(await ctl(['webhook', 'rm', hook]), new RegExp(`removed webhook ${hook}`));
      assert.equal((await ctl(['webhook', 'list'])).trim(), 'no webhooks');
    } finally {
      receiver.close();
    }
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

  it('a canary: approved for agents labelled zone=a, its members, ACKs and health shown, then promoted from the page', { timeout: STEP_TIMEOUT }, async () => {
    const inA = watch(server.grpc, tokens.agent, 'e2e-canary-a', 'order', ['checkout'], { zone: 'a' });
    const inB = watch(server.grpc, tokens.agent, 'e2e-canary-b', 'order', ['checkout'], { zone: 'b' });
    try {
      await until('both agents have the live config', async () => inA.revisions.length && inB.revisions.length, 10_000);
      // the chain's topology back to the one without inversion (an earlier step applied B)
      await api('PUT', '/chains/checkout/topology', tokens.uploader, example('checkout-topology.json'));
      const up = await api('POST', '/chains/checkout/runs', tokens.uploader, example('checkout-run-c-drift.json'));
      const page = tabs.approver;
      await open(page, '#/baselines/' + up.baseline_id);
      await page.locator('#canary-on').check();
      await page.locator('#canary-select').fill('zone=a');
      await page.locator('#canary-bake').fill('600');
      await page.locator('#canary-auto').uncheck();
      await page.locator('#decision-comment').fill('zone a first');
      await page.locator('#approve').click();
      await page.locator('.alert-ok', { hasText: 'to a canary first' }).waitFor();
      const canary = await until('the canary publication', async () => (await api('GET', `/baselines/${up.baseline_id}/rollout`, tokens.reader)).canary, 10_000);
      assert.deepEqual([canary.state, canary.selector], ['baking', { labels: { zone: 'a' } }]);
      // only the zone-a agent got the canary's revision
      await until('the canary agent gets it', async () => inA.revisions.includes(canary.revision), 10_000);
      assert.ok(!inB.revisions.includes(canary.revision), `zone b got ${inB.revisions}`);
      // its members and ACKs, on the page, which reads the rollout again while it bakes
      await page.locator('#canary-acked', { hasText: '1 of 1' }).waitFor({ timeout: 15_000 });
      assert.equal(await page.locator('#canary-state').innerText(), 'baking');
      assert.equal(await page.locator('#canary-members').innerText(), 'e2e-canary-a');
      assert.match(await page.locator('#canary').innerText(), /agents labelled zone=a[\s\S]*a person decides/);
      await shot(page, 'canary');
      await page.setViewportSize({ width: 390, height: 844 });
      assert.ok(await page.evaluate(() => document.documentElement.scrollWidth) <= 390, 'the canary view scrolls sideways at 390 px');
      await page.setViewportSize({ width: 1440, height: 900 });
      await page.locator('#canary-promote').click();
      await page.locator('.alert-ok', { hasText: 'promoted' }).waitFor();
      const ended = (await api('GET', `/baselines/${up.baseline_id}/rollout`, tokens.reader)).canary;
      assert.deepEqual([ended.state, ended.reason], ['promoted', 'promoted by abe']);
      await until('every agent gets the promotion', async () => inA.revisions.includes(ended.end_revision) && inB.revisions.includes(ended.end_revision), 10_000);
      assert.equal(await page.locator('#canary-state').innerText(), 'promoted');
      assert.equal(await page.locator('#canary-promote').count(), 0);
    } finally {
      inA.close();
      inB.close();
    }
  });

  it('a timeout that kills a quarter of the load test: the baseline page plots the distribution against it with the server’s kill rate, blocks approval, and the diff view draws both runs', { timeout: 2 * STEP_TIMEOUT }, async () => {
    // A chain of its own: the checkout topology with the load tool's labels.
    const chain = 'checkout-kill';
    const topology = (pinned) => {
      const t = example('checkout-topology.json');
      for (const [i, label] of [[1, 'inventory'], [2, 'payment'], [3, 'user']]) t.segments[i].labels = [label];
      if (pinned) t.segments[1].pinned_timeout_ms = pinned;
      return t;
    };
    // payment and user fast and tight in both runs (their derived timeouts kill little)
    const others = {
      payment: Array.from({ length: 90 }, (_, i) => [60 + i, i < 20 ? 23 : 22]),
      user: Array.from({ length: 12 }, (_, i) => [5 + i, i < 8 ? 167 : 166]),
    };
    // The earlier load test, live: inventory P99 120 ms / P999 160 ms, its derived timeout
    // (P99 + 10 % = 132 ms) kills 0.5 %.
    await api('PUT', `/chains/${chain}/topology`, tokens.uploader, topology(null));
    const res = await fetch(server.base + `/api/v1/chains/${chain}/runs?format=jmeter`, {
      method: 'POST', headers: { Authorization: 'Bearer ' + tokens.uploader, 'Content-Type': 'text/csv' },
      body: jtl({ inventory: [[40, 8000], [90, 1800], [120, 150], [160, 40], [250, 10]], ...others }),
    });
    const earlier = await res.json();
    assert.equal(res.status, 201, JSON.stringify(earlier));
    const earlierDoc = await api('GET', '/baselines/' + earlier.baseline_id, tokens.reader);
    const earlierInv = earlierDoc.segments.find((x) => x.id === 'order->inventory');
    assert.deepEqual([earlierInv.p99_ms, earlierInv.timeout_ms, earlierInv.kill_rate], [120, 132, 0.005]);
    await api('POST', `/baselines/${earlier.baseline_id}/approve`, tokens.approver, { comment: 'earlier load test' });

    // The seed's incident: inventory pinned at 100 ms, and a load test with P99 180 ms /
    // P999 420 ms (7,500 samples at 50 ms, 2,300 at 150, 100 at 180, 89 at 300, 11 at 420),
    // uploaded on the Runs page as a JMeter JTL.
    await api('PUT', `/chains/${chain}/topology`, tokens.uploader, topology(100));
    const up = tabs.uploader;
    await open(up, `#/chains/${chain}/runs`);
    await up.locator('#run-file').setInputFiles({
      name: 'inventory-pinned.jtl', mimeType: 'text/csv',
      buffer: Buffer.from(jtl({ inventory: [[50, 7500], [150, 2300], [180, 100], [300, 89], [420, 11]], ...others })),
    });
    await up.locator('#run-format').selectOption('jmeter');
    await up.locator('#upload').click();
    await up.locator('#result-run-id').waitFor();
    assert.match(await up.locator('#upload-result').innerText(), /jmeter[\s\S]*ERROR: [^\n]*100 ms timeout[^\n]*kills 25 %/);
    const id = ids.killRate = (await up.locator('#result-draft').innerText()).match(/bl-\d{8}-\d+/)[0];
    const doc = await api('GET', '/baselines/' + id, tokens.reader);
    const inv = doc.segments.find((x) => x.id === 'order->inventory');
    assert.deepEqual([inv.p99_ms, inv.p999_ms, inv.timeout_ms, inv.kill_rate, inv.attempts_per_call], [180, 420, 100, 0.25, 1.25]);
    const dist = await api('GET', `/baselines/${id}/distribution?segment=order->inventory`, tokens.reader);
    assert.deepEqual([dist.source, dist.samples, dist.kill_rate], ['histogram', 10000, 0.25]);

    const page = tabs.approver;
    await open(page, '#/baselines/' + id);
    // the inventory plot opened by itself (its finding), with the live baseline's run dashed
    const plot = page.locator('details.dist[data-segment="order->inventory"][open] svg.cdf');
    await plot.waitFor();
    const timeout = plot.locator('.mark-timeout');
    assert.equal(Number(await timeout.getAttribute('data-ms')), 100);
    // the server's kill rate beside the timeout line, never one read off the curve
    assert.equal(Number(await timeout.getAttribute('data-slower')), dist.kill_rate);
    assert.equal(await timeout.locator('.timeout-slower').textContent(), fmtKill(dist.kill_rate) + ' of load-test calls slower than the timeout');
    assert.match(await timeout.locator('.timeout-slower').textContent(), /^25 % /);
    assert.equal(Number(await plot.locator('.mark-p99').getAttribute('data-ms')), 180);
    assert.equal(Number(await plot.locator('.mark-p999').getAttribute('data-ms')), 420);
    assert.match(await plot.locator('title').first().textContent(), /order->inventory[\s\S]*10,000 samples/);
    // the diff view: both runs' curves (the live one dashed) and both timeouts
    assert.equal(await plot.locator('path.curve').count(), 2);
    assert.equal(await plot.locator('path.curve-old[data-curve="old"]').count(), 1);
    assert.equal(Number(await plot.locator('.mark-timeout-old').getAttribute('data-ms')), earlierInv.timeout_ms);
    assert.equal(await plot.locator('.mark-timeout-old .timeout-slower').textContent(), fmtKill(earlierInv.kill_rate) + ' slower');
    assert.equal(Number(await plot.locator('.mark-base-p99').getAttribute('data-ms')), earlierInv.p99_ms);
    const figure = page.locator('details.dist[data-segment="order->inventory"] figure');
    assert.match(await figure.locator('.legend').innerText(), /live baseline’s run \(dashed\)[\s\S]*live timeout/);
    assert.match(await figure.locator('figcaption').innerText(), new RegExp(`25 %\\s*of the load test’s calls \\(10,000 samples[\\s\\S]*1\\.25 attempts per call[\\s\\S]*Live baseline\\s*${earlier.baseline_id}`));
    // the segment table's kill column
    assert.match(await page.locator('#segments-table tr[data-segment="order->inventory"] .killed').innerText(), /^25 % \(1\.25 attempts\/call\)$/);
    assert.equal(await page.locator('#segments-table tr[data-segment="gateway->order"] .killed').innerText(), '—');
    // the error finding, and approval blocked by it
    const finding = page.locator('#findings li[data-check="timeout_kill_rate"]');
    assert.equal(await finding.count(), 1);
    assert.match(await finding.innerText(), /ERROR\s*timeout_kill_rate: [^\n]*100 ms timeout[^\n]*kills 25 %/);
    assert.equal(await page.locator('#approve').isDisabled(), true);
    assert.match(await page.locator('#decision-reason').innerText(), /Approval is blocked by 1 error finding: timeout_kill_rate on order->inventory/);
    // a segment the runs hold no distribution of: a note, not an error, once opened
    const gateway = page.locator('details.dist[data-segment="gateway->order"]');
    assert.equal(await gateway.locator('svg').count(), 0, 'closed segments are not drawn');
    await gateway.locator('summary').click();
    assert.match(await gateway.locator('.no-distribution').innerText(), /No latency distribution to draw/);
    assert.equal(await page.locator('#distributions [role="alert"]').count(), 0);
    await gateway.locator('summary').click();
    // the finding's link opens the plot
    await page.locator('details.dist[data-segment="order->inventory"] summary').click();
    assert.equal(await page.locator('details.dist[data-segment="order->inventory"]').getAttribute('open'), null);
    await finding.locator('a.to-distribution').click();
    await plot.waitFor();
    await shot(page, 'kill-rate');

    // a phone: nothing wider than the screen, the plot redrawn at the width it has and its
    // words wrapped to fit
    await page.setViewportSize({ width: 390, height: 844 });
    await page.waitForFunction(() => [...document.querySelectorAll('#distributions svg.cdf')].every((svg) => Number(svg.getAttribute('width')) <= 366));
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth) <= 390, 'the baseline page scrolls sideways at 390 px');
    assert.match(await timeout.locator('.timeout-slower').textContent(), /^25 % of load-test calls slower than the timeout$/);
    // every label inside its plot
    assert.deepEqual(await page.evaluate(() => [...document.querySelectorAll('#distributions svg.cdf text')].filter((t) => {
      const b = t.getBBox();
      return b.x < -1 || b.x + b.width > Number(t.ownerSVGElement.getAttribute('width')) + 1;
    }).map((t) => t.textContent)), []);
    await page.screenshot({ path: path.join(SHOTS, 'console-kill-rate-390.png'), fullPage: true });
    await page.setViewportSize({ width: 1440, height: 900 });

    // the live baseline itself: its own run only, the worst segment opened by itself
    await open(page, '#/baselines/' + earlier.baseline_id);
    const own = page.locator('details.dist[data-segment="order->inventory"][open] svg.cdf');
    await own.waitFor();
    assert.equal(await own.locator('path.curve').count(), 1);
    assert.equal(await own.locator('.mark-timeout-old').count(), 0);
    assert.equal(await own.locator('.mark-timeout .timeout-slower').textContent(), '0.5 % of load-test calls slower than the timeout');
    // run A gave percentiles only: no kill rate, and a note instead of a plot
    await open(page, '#/baselines/' + ids.first);
    assert.equal(await page.locator('#segments-table tr[data-segment="order->inventory"] .killed').innerText(), '—');
    assert.equal(await page.locator('details.dist[open]').count(), 0, 'nothing to open by itself');
    const a = page.locator('details.dist[data-segment="order->inventory"]');
    await a.locator('summary').click();
    assert.match(await a.locator('.no-distribution').innerText(), /gave percentiles only for order->inventory/);

    // a native run with percentile points of inventory: the server's bounds, a curve through them
    await api('PUT', '/chains/checkout-points/topology', tokens.uploader, example('checkout-topology.json'));
    const native = example('checkout-run-a.json');
    native.segments[1].distribution = { kind: 'percentiles', points: [
      { percentile: 50, us: 20_000 }, { percentile: 99, us: 40_000 }, { percentile: 99.9, us: 150_000 }, { percentile: 100, us: 200_000 }] };
    const points = await api('POST', '/chains/checkout-points/runs', tokens.uploader, native);
    const bounds = (await api('GET', '/baselines/' + points.baseline_id, tokens.reader)).segments.find((x) => x.id === 'order->inventory').kill_rate_bounds;
    assert.deepEqual(bounds, [0.001, 0.01], 'the 44 ms timeout lies between p99 and p999');
    await open(page, '#/baselines/' + points.baseline_id);
    assert.equal(await page.locator('#segments-table tr[data-segment="order->inventory"] .killed').innerText(), '0.1–1 %');
    const bounded = page.locator('details.dist[data-segment="order->inventory"][open] svg.cdf');
    await bounded.waitFor();
    assert.equal(await bounded.locator('.mark-timeout .timeout-slower').textContent(), '0.1–1 % of load-test calls slower than the timeout');
    assert.match(await page.locator('details.dist[data-segment="order->inventory"] figcaption').innerText(), /bounds, as the run holds percentile points only/);
  });

  it('no CSP violation or script error happened, and the screenshots are copied to docs/', () => {
    assert.deepEqual(browser.problems, []);
    fs.mkdirSync(DOCS, { recursive: true });
    for (const name of ['chains', 'runs', 'baseline', 'baseline-inverted', 'agents', 'history', 'production', 'alerts', 'canary', 'kill-rate']) {
      fs.copyFileSync(path.join(SHOTS, `console-${name}.png`), path.join(DOCS, `console-${name}.png`));
    }
  });
});
