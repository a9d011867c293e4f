// What an agent sends: `BudgetControl.Report` over gRPC (SPEC §8), and a minimal Watch that
// ACKs every revision it receives, written by hand with node's own http2, zlib and a few
// lines of protobuf, so the console test needs no gRPC package:
//   - the latency histogram in the HdrHistogram V2 compressed encoding (microseconds, 3
//     significant digits), as any language's HdrHistogram library writes it;
//   - the ReportRequest message of proto/budget/v1/budget.proto;
//   - one unary gRPC call (HTTP/2 POST, 5-byte message framing, grpc-status trailer).

import http2 from 'node:http2';
import zlib from 'node:zlib';

// ---------------------------------------------------------------------------------------------
// HdrHistogram V2 (https://github.com/HdrHistogram/HdrHistogram/blob/master/Encoding.md)
// ---------------------------------------------------------------------------------------------
const SIGNIFICANT_DIGITS = 3;
const SUB_BUCKET_HALF_COUNT = 1024; // 3 digits: 2048 sub-buckets, unit resolution up to 2047
const HIGHEST_US = 3_600_000_000; // an hour, as budgetd's rollups

/** The counts-array index of a value (lowest discernible value 1, 3 significant digits). */
export function countsIndex(value) {
  let bucket = 0;
  while (value >= 2 * SUB_BUCKET_HALF_COUNT * 2 ** bucket) bucket++;
  const sub = Math.floor(value / 2 ** bucket);
  return bucket * SUB_BUCKET_HALF_COUNT + sub;
}

/** ZigZag LEB128 of a (small) signed integer. */
function zigzag(n, out) {
  let v = n >= 0 ? 2 * n : -2 * n - 1;
  do {
    let byte = v % 128;
    v = Math.floor(v / 128);
    if (v > 0) byte |= 0x80;
    out.push(byte);
  } while (v > 0);
}

/** Latencies in microseconds → the V2 compressed encoding. */
export function hdrV2Compressed(valuesUs) {
  const counts = new Map();
  for (const v of valuesUs) {
    const i = countsIndex(Math.max(1, Math.round(v)));
    counts.set(i, (counts.get(i) || 0) + 1);
  }
  const max = Math.max(-1, ...counts.keys());
  const payload = [];
  let zeros = 0;
  for (let i = 0; i <= max; i++) {
    const c = counts.get(i) || 0;
    if (c === 0) {
      zeros++;
      continue;
    }
    if (zeros) zigzag(-zeros, payload);
    zeros = 0;
    zigzag(c, payload);
  }
  const header = Buffer.alloc(40);
  header.writeUInt32BE(0x1c849313, 0); // V2 cookie (base 0x1c849303 | 0x10: 8-byte words, as libraries write it)
  header.writeUInt32BE(payload.length, 4);
  header.writeUInt32BE(0, 8); // normalizing index offset
  header.writeUInt32BE(SIGNIFICANT_DIGITS, 12);
  header.writeBigUInt64BE(1n, 16); // lowest discernible value
  header.writeBigUInt64BE(BigInt(HIGHEST_US), 24);
  header.writeDoubleBE(1.0, 32); // integer to double conversion ratio
  const deflated = zlib.deflateSync(Buffer.concat([header, Buffer.from(payload)]));
  const out = Buffer.alloc(8);
  out.writeUInt32BE(0x1c849314, 0); // V2 compressed cookie (base 0x1c849304 | 0x10)
  out.writeUInt32BE(deflated.length, 4);
  return Buffer.concat([out, deflated]);
}

// ---------------------------------------------------------------------------------------------
// protobuf (only what ReportRequest needs)
// ---------------------------------------------------------------------------------------------
function varint(n, out) {
  let v = n;
  do {
    let byte = v % 128;
    v = Math.floor(v / 128);
    if (v > 0) byte |= 0x80;
    out.push(byte);
  } while (v > 0);
}

const pb = {
  varint(field, n) {
    const out = [];
    varint(field * 8, out);
    varint(n, out);
    return Buffer.from(out);
  },
  bytes(field, buf) {
    const out = [];
    varint(field * 8 + 2, out);
    varint(buf.length, out);
    return Buffer.concat([Buffer.from(out), buf]);
  },
  string(field, s) {
    return this.bytes(field, Buffer.from(s, 'utf8'));
  },
  map(field, obj) {
    return Buffer.concat(Object.entries(obj || {}).map(([k, v]) => this.bytes(field, Buffer.concat([this.string(1, k), this.varint(2, v)]))));
  },
  stringMap(field, obj) {
    return Buffer.concat(Object.entries(obj || {}).map(([k, v]) => this.bytes(field, Buffer.concat([this.string(1, k), this.string(2, v)]))));
  },
};

/** A gRPC message frame (uncompressed). */
function grpcFrame(message) {
  const frame = Buffer.alloc(5);
  frame.writeUInt8(0, 0);
  frame.writeUInt32BE(message.length, 1);
  return Buffer.concat([frame, message]);
}

/** The leading varint field 1 of a message (a BudgetUpdate's revision, a ReportResponse's count). */
function firstVarint(buf) {
  if (buf[0] !== 0x08) throw new Error('unexpected message ' + buf.subarray(0, 8).toString('hex'));
  let n = 0;
  let mul = 1;
  for (let i = 1; i < buf.length; i++) {
    n += (buf[i] & 0x7f) * mul;
    mul *= 128;
    if (!(buf[i] & 0x80)) break;
  }
  return n;
}

/** A SegmentWindow: {chain, segment, startMs, endMs, calls, attempts, retries, outcomes, latenciesUs}. */
function segmentWindow(w) {
  return Buffer.concat([
    pb.string(1, w.chain), pb.string(2, w.segment),
    pb.varint(3, w.startMs), pb.varint(4, w.endMs),
    pb.varint(5, w.calls), pb.varint(6, w.attempts),
    pb.map(7, w.retries), pb.map(8, w.outcomes),
    pb.bytes(9, hdrV2Compressed(w.latenciesUs || [])),
  ]);
}

/** Decodes `accepted_windows` (field 1) of a ReportResponse. */
function acceptedWindows(buf) {
  return buf.length ? firstVarint(buf) : 0;
}

// ---------------------------------------------------------------------------------------------
// gRPC
// ---------------------------------------------------------------------------------------------
/** `BudgetControl.Report` to `grpcUrl` (http://host:port) with an agent token; resolves to the accepted windows. */
export function report(grpcUrl, token, agentId, windows) {
  const message = Buffer.concat([pb.string(1, agentId), ...windows.map((w) => pb.bytes(2, segmentWindow(w)))]);
  return new Promise((resolve, reject) => {
    const client = http2.connect(grpcUrl);
    client.on('error', reject);
    const req = client.request({
      ':method': 'POST', ':path': '/budget.v1.BudgetControl/Report',
      'content-type': 'application/grpc', te: 'trailers', authorization: 'Bearer ' + token,
    });
    const chunks = [];
    let status = null;
    let why = '';
    const take = (headers) => {
      if (headers['grpc-status'] !== undefined) {
        status = Number(headers['grpc-status']);
        why = decodeURIComponent(headers['grpc-message'] || '');
      }
    };
    req.on('response', take);
    req.on('trailers', take);
    req.on('data', (c) => chunks.push(c));
    req.on('error', (e) => { client.close(); reject(e); });
    req.on('end', () => {
      client.close();
      if (status !== 0) return reject(new Error(`Report answered grpc-status ${status}: ${why}`));
      const body = Buffer.concat(chunks);
      resolve(acceptedWindows(body.subarray(5)));
    });
    req.end(grpcFrame(message));
  });
}

/** One unary call of `method` with an agent token; resolves once grpc-status is 0. */
function unary(client, token, method, message) {
  return new Promise((resolve, reject) => {
    const req = client.request({
      ':method': 'POST', ':path': '/budget.v1.BudgetControl/' + method,
      'content-type': 'application/grpc', te: 'trailers', authorization: 'Bearer ' + token,
    });
    let status = null;
    const take = (headers) => {
      if (headers['grpc-status'] !== undefined) status = Number(headers['grpc-status']);
    };
    req.on('response', take);
    req.on('trailers', take);
    req.on('data', () => {});
    req.on('error', reject);
    req.on('end', () => (status === 0 ? resolve() : reject(new Error(`${method} answered grpc-status ${status}`))));
    req.end(grpcFrame(message));
  });
}

/**
 * An agent: `BudgetControl.Watch` of `chains` with `labels`, ACKing every revision it
 * receives. Returns {revisions (received, in order), close()}.
 */
export function watch(grpcUrl, token, agentId, service, chains, labels) {
  const client = http2.connect(grpcUrl);
  client.on('error', () => {});
  const request = Buffer.concat([pb.string(1, agentId), pb.string(2, service), ...chains.map((c) => pb.string(3, c)),
    pb.stringMap(5, labels), pb.string(6, 'node/e2e')]);
  const req = client.request({
    ':method': 'POST', ':path': '/budget.v1.BudgetControl/Watch',
    'content-type': 'application/grpc', te: 'trailers', authorization: 'Bearer ' + token,
  });
  const revisions = [];
  let pending = Buffer.alloc(0);
  req.on('data', (chunk) => {
    pending = Buffer.concat([pending, chunk]);
    while (pending.length >= 5 && pending.length >= 5 + pending.readUInt32BE(1)) {
      const len = pending.readUInt32BE(1);
      const revision = firstVarint(pending.subarray(5, 5 + len));
      pending = pending.subarray(5 + len);
      revisions.push(revision);
      unary(client, token, 'Ack', Buffer.concat([pb.string(1, agentId), pb.varint(2, revision), pb.varint(3, 1)])).catch(() => {});
    }
  });
  req.on('error', () => {});
  req.end(grpcFrame(request));
  return { revisions, close: () => client.close() };
}

/**
 * Latencies (µs) of `n` successful attempts whose nearest-rank p50, p99 and p999 fall near the
 * given milliseconds, with a tail up to `maxMs`: a deterministic piecewise quantile function.
 */
export function latencies(n, { p50, p99, p999, maxMs }) {
  const knots = [[0, p50 * 0.4], [0.5, p50], [0.99, p99], [0.999, p999], [1, maxMs]];
  const out = [];
  for (let i = 0; i < n; i++) {
    const q = (i + 0.5) / n;
    let k = 1;
    while (k < knots.length - 1 && q > knots[k][0]) k++;
    const [q0, v0] = knots[k - 1];
    const [q1, v1] = knots[k];
    out.push((v0 + ((q - q0) / (q1 - q0)) * (v1 - v0)) * 1000);
  }
  return out;
}
