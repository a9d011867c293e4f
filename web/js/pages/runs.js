// A chain's runs: the upload form (one file or several — one per endpoint, as oha and wrk2 write
// them — format, unit, label mapping), the upload result with its drift report, and the recent
// runs, each with the draft it opened and how it compares with the live baseline.

import { api, caps } from '../api.js';
import { enc, h } from '../dom.js';
import { drift } from '../drift.js';
import { fmt } from '../format.js';
import { chainTabs, pageHead, ui } from '../ui.js';

const FORMATS = [
  ['auto', 'Detect automatically'],
  ['native', 'native JSON (budgetd run document)'],
  ['locust', 'Locust *_stats.csv'],
  ['oha', 'oha JSON'],
  ['k6', 'k6 summary JSON'],
  ['k6_points', 'k6 raw points (--out json / --out csv)'],
  ['artillery', 'Artillery JSON report'],
  ['autocannon', 'autocannon JSON (-j)'],
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


export async function runs(root, [chain]) {
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
    [{ label: 'Run' }, { label: 'Uploaded' }, { label: 'By' }, { label: 'Format' }, { label: 'Tool' }, { label: 'Topology' },
      { label: 'Draft it opened' }, { label: 'Drift vs live' }, { label: 'Percentiles' }],
    runs.map((r) => ({
      data: { run: r.id },
      cells: [
        h('span', { class: 'mono' }, r.id), ui.when(r.created_at), r.uploaded_by, r.format, r.tool || '—', 'v' + r.topology_version,
        r.draft_id ? h('span', { class: 'run-draft' }, ui.baselineLink(r.draft_id), ' ', ui.state(r.draft_state)) : h('span', { class: 'muted run-draft' }, 'none'),
        h('span', { class: 'run-drift' }, driftCell(r)),
        h('details', null, h('summary', null, r.segments.length + ' segments'), percentileTable(r.segments)),
      ],
    })), { id: 'runs-table', label: 'Runs', rowHeader: true, empty: 'No runs yet.' }));
  const reloadList = async () => {
    try {
      renderList((await api.get('/chains/' + chainQ + '/runs?limit=20')).runs);
    } catch (e) {
      listBox.replaceChildren(ui.error(e));
    }
  };
  renderList(list.runs);
}

/** The run against the live baseline, as the server compared them (its largest change). */
function driftCell(run) {
  if (!run.vs_live) return h('span', { class: 'muted' }, '— (no live baseline)');
  const d = drift.latest(run);
  if (!d) return h('span', { class: 'muted' }, 'nothing compared');
  return h('span', { class: ['change', d.drift ? 'change-big' : null] },
    drift.marker(d.pct), ' ', h('span', { class: 'sub' }, d.segment + ' ' + d.metric + ' vs ' + run.vs_live.baseline_id),
    d.drift ? h('span', { class: 'tag' }, ' DRIFT') : h('span', { class: 'sub' }, ' (within ' + d.threshold + ' %)'));
}

/** A file's label by default: its name without extensions (`inventory.json` → `inventory`). */
function stem(name) {
  return name.replace(/\.[^.]*$/, '').replace(/\.[^.]*$/, '');
}

function percentileTable(segments) {
  return ui.table([{ label: 'Segment' }, { label: 'Samples', num: true }, { label: 'Failures', num: true }, { label: 'p50', num: true }, { label: 'p99', num: true }, { label: 'p999', num: true }],
    segments.map((x) => [h('span', { class: 'mono' }, x.id), fmt.num(x.samples), fmt.failures(x.failures), fmt.ms(x.p50_ms), fmt.ms(x.p99_ms), fmt.ms(x.p999_ms)]),
    { label: 'Percentiles', rowHeader: true, class: 'compact' });
}

function uploadForm(chain, segmentIds, result, onDone) {
  const file = h('input', { id: 'run-file', name: 'file', type: 'file', multiple: true, required: true, 'aria-describedby': 'run-file-help' });
  // several files: one label each (the part's name), for single-endpoint tools
  const fileLabels = h('div', { id: 'file-labels', class: 'file-labels' });
  file.addEventListener('change', () => {
    const files = [...(file.files || [])];
    fileLabels.replaceChildren(...(files.length > 1
      ? [h('p', { class: 'help' }, 'Each file is one endpoint: its label (default: the file name) is mapped to a segment like any tool label.'),
        ...files.map((f, i) => h('div', { class: 'file-label-row' },
          h('label', { for: 'file-label-' + i }, 'Label of ' + f.name),
          h('input', { id: 'file-label-' + i, class: 'file-label', type: 'text', value: stem(f.name), 'data-file': f.name })))]
      : []));
  });
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
      const files = [...(file.files || [])];
      const f = files[0];
      if (!f) return;
      const q = new URLSearchParams();
      let contentType = 'application/octet-stream';
      if (files.length > 1) {
        if (format.value !== 'auto' && format.value !== 'native') q.set('format', format.value);
      } else if (format.value === 'native') {
        q.set('format', 'native');
        contentType = 'application/json';
      } else if (format.value === 'auto') {
        if (await looksNative(f)) contentType = 'application/json';
      } else {
        q.set('format', format.value);
      }
      if (unit.value) q.set('unit', unit.value);
      if (files.length === 1 && label.value.trim()) q.set('label', label.value.trim());
      const map = {};
      for (const row of mapRows.querySelectorAll('.map-row')) {
        const l = row.querySelector('.map-label').value.trim();
        const sg = row.querySelector('.map-segment').value;
        if (l && sg) map[l] = sg;
      }
      if (Object.keys(map).length) q.set('map', JSON.stringify(map));
      // one file: the raw body; several: multipart, one part per file named by its label
      let body = f;
      if (files.length > 1) {
        body = new FormData();
        const labels = [...fileLabels.querySelectorAll('.file-label')];
        files.forEach((x, i) => body.append((labels[i] && labels[i].value.trim()) || stem(x.name), x, x.name));
      }
      submit.disabled = true;
      const size = files.reduce((n, x) => n + x.size, 0);
      result.replaceChildren(ui.loading('Uploading ' + (files.length > 1 ? files.length + ' files' : f.name) + ' (' + fmt.num(size) + ' bytes)…'));
      try {
        const qs = q.toString();
        const res = await api.request('POST', '/chains/' + enc(chain) + '/runs' + (qs ? '?' + qs : ''), { body, contentType });
        result.replaceChildren(uploadResult(res));
        onDone();
      } catch (e) {
        result.replaceChildren(ui.error(e, 'Upload refused'));
      } finally {
        submit.disabled = false;
      }
    },
  },
  h('div', { class: 'field' }, h('label', { for: 'run-file' }, 'Load-test files'), file,
    h('p', { id: 'run-file-help', class: 'help' }, 'One file, or several that make one run (one per endpoint, as oha and wrk2 write them).'), fileLabels),
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
