// api — the session (the API token and the detected capabilities, sessionStorage only), the fetch
// wrapper (bearer token, JSON, the {"error":{code,message,details}} shape) and the role detection.

// ---------------------------------------------------------------------------------------
// session — the token lives in sessionStorage only (this tab, gone when it closes)
// ---------------------------------------------------------------------------------------
export const session = {
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
export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

/** Called on any 401 for the session's own token (set by the router: sign out, say why). */
let onExpired = () => {};

/** Sets what happens when the server no longer accepts the session's token. */
export function whenExpired(fn) {
  onExpired = fn;
}

export const api = {
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
      // a FormData body brings its own multipart Content-Type (with the boundary)
      if (!(o.body instanceof FormData)) headers['Content-Type'] = o.contentType || 'application/octet-stream';
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
      if (res.status === 401 && !o.token) onExpired(err);
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
export const caps = {
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
