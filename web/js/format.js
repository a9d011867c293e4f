// format — number, percent and time formatting.

export const fmt = {
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
