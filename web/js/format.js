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
  /** A failure count: null is "unknown" (the file does not say), never 0. */
  failures(v) {
    return v === null || v === undefined ? 'unknown' : Number(v).toLocaleString('en-US');
  },
  pct(v) {
    if (v === null || v === undefined) return '—';
    const n = Number(v);
    const sign = n > 0 ? '+' : n < 0 ? '−' : '±';
    return sign + Math.abs(n).toFixed(Math.abs(n) >= 100 ? 0 : 1) + ' %';
  },
  /** A multiplier (retry amplification): "1.3×". */
  times(v) {
    if (v === null || v === undefined) return '—';
    return String(Number(Number(v).toFixed(2))) + '×';
  },
  /** A fraction as a percentage: "23.1 %", "0.05 %", "<0.01 %". */
  share(v) {
    if (v === null || v === undefined) return '—';
    const n = Number(v);
    if (n === 0) return '0 %';
    if (n > 0 && n < 0.0001) return '<0.01 %';
    if (n < 1 && n > 0.9999) return '>99.99 %';
    return (n * 100).toFixed(n < 0.01 ? 2 : 1) + ' %';
  },
  /**
   * A kill rate as budgetctl writes it: a percentage with up to two decimals, trailing zeros
   * dropped ("25 %", "1.03 %", "0.1 %"); "<0.01 %" for a share under that.
   */
  killShare(v) {
    if (v === null || v === undefined) return '—';
    const n = Number(v);
    if (n > 0 && n < 0.00005) return '<0.01 %';
    return String(Number((n * 100).toFixed(2))) + ' %';
  },
  /**
   * What a baseline segment's timeout kills of the load test's samples, from the server's
   * fields: "25 % (1.25 attempts/call)" (a histogram; attempts only for segments that retry on
   * deadline), "0.1–1 %" (bounds from percentile points), "—" (no distribution).
   */
  killed(rate, bounds, attempts) {
    if (rate !== null && rate !== undefined) {
      return this.killShare(rate) + (attempts !== null && attempts !== undefined ? ' (' + Number(Number(attempts).toFixed(3)) + ' attempts/call)' : '');
    }
    if (Array.isArray(bounds) && bounds.length === 2) {
      return bounds[0] === bounds[1] ? this.killShare(bounds[1]) : this.killShare(bounds[0]).replace(' %', '') + '–' + this.killShare(bounds[1]);
    }
    return '—';
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
  /** An alert rule in words. */
  alertRule(r) {
    return { amplification: 'Retry amplification', kill_rate: 'Timeout kill rate', drift: 'Production drift', nack: 'Config refused (NACK)', archive_backlog: 'Archive backlog' }[r] || r;
  },
  /** An alert's value and threshold in its rule's unit: ["3×", "2×"]; threshold null when it has none. */
  alertValue(a) {
    switch (a.rule) {
      case 'amplification': return [this.times(a.value), this.times(a.threshold)];
      case 'kill_rate': return [this.share(a.value), this.share(a.threshold)];
      case 'drift': return [this.pct(a.value), '±' + a.threshold + ' %'];
      case 'nack': return [a.value + ' agent' + (a.value === 1 ? '' : 's') + ' refusing', null];
      case 'archive_backlog': return [a.value + ' s', a.threshold + ' s'];
      default: return [String(a.value), String(a.threshold)];
    }
  },
  reason(r) {
    return { first_run: 'first run', no_approved_baseline: 'no approved baseline', drift: 'drift', recompute: 'recompute' }[r] || r;
  },
};
