// budgetd console — vanilla JS ES modules, no build step, served by budgetd with a strict CSP (no
// inline script or style: every element is built with DOM calls, every style lives in style.css).
// This file is the entry module (index.html loads it with <script type="module">); the rest live
// under js/, one concern each, imports pointing one way (pages → widgets → dom/format/api):
//   js/dom.js      — element builders (h, s) that never touch innerHTML
//   js/format.js   — number, percent and time formatting
//   js/api.js      — the session (token and capabilities, sessionStorage only), the fetch wrapper
//                    (bearer token, JSON, the {"error":{code,message,details}} shape), role detection
//   js/ui.js       — shared widgets: error box, badges, tables, definition lists, page heading
//   js/drift.js    — change markers (the server's drift flags) and a chain's latest-run drift
//   js/tree.js     — the call tree drawn to scale as SVG, from the server's numbers
//   js/cdf.js      — a segment's latency distribution as SVG (log time axis, timeout and the
//                    share slower than it, p99 / p999): production against the baseline's, or a
//                    baseline's load test (with the live baseline's dashed), from the server's points
//   js/pages/*.js  — one module per page: signin, chains, runs (upload), baseline (approve /
//                    reject), history (rollback), production (a chain's runtime feedback),
//                    agents, alerts
//   js/router.js   — location.hash → page, with per-page cleanup (polling timers)
//
// The console computes no rule: findings, drift flags and thresholds, stage needs, inversions
// and budget parts all come from the server (the baseline document, /diff, /tree, /distribution,
// the runs' vs_live comparison, /production, /alerts); these files only lay them out.

import { app } from './js/router.js';

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', () => app.init());
else app.init();
