// The server's JSON API (crates/sluice-cli/src/web/api.rs). State-changing requests carry the
// session's CSRF token in X-Sluice-CSRF; the cookie goes by itself (same origin, HttpOnly).

/** @typedef {{ read: boolean, write: boolean, list: boolean }} Rights */
/** @typedef {{ csrf: string, rights: Rights, fingerprint: string }} SessionInfo */
/** @typedef {{ name: string, kind: "file" | "dir" | "link", size: number, mtime: number, target: string | null }} Entry */
/** @typedef {{ have: number, exists: { size: number, mtime: number } | null }} UploadStatus */

/** A failed request: the server's code (`auth`, `refused`, `exists`, ...) and message. */
export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {string} code
   * @param {string} message
   * @param {any} [body]
   */
  constructor(status, code, message, body) {
    super(message);
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

let csrf = "";

/**
 * @param {Response} response
 * @returns {Promise<any>}
 */
async function parse(response) {
  const text = await response.text();
  /** @type {any} */
  let body = {};
  try {
    body = text ? JSON.parse(text) : {};
  } catch {
    body = { error: "bad-answer", message: text.slice(0, 200) };
  }
  if (!response.ok) {
    throw new ApiError(response.status, body.error ?? "error", body.message ?? response.statusText, body);
  }
  return body;
}

/**
 * @param {string} path
 * @param {Record<string, string | number>} params
 */
function url(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) q.set(k, String(v));
  return `${path}?${q}`;
}

/**
 * @param {string} path
 * @param {any} body
 */
async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Sluice-CSRF": csrf },
    body: JSON.stringify(body),
  });
  return parse(response);
}

/**
 * @param {string} token
 * @returns {Promise<SessionInfo>}
 */
export async function login(token) {
  const info = await post("/api/login", { token });
  csrf = info.csrf;
  return info;
}

/** @returns {Promise<SessionInfo>} the session of this page's cookie (401 when none) */
export async function session() {
  const info = await parse(await fetch("/api/session"));
  csrf = info.csrf;
  return info;
}

export async function logout() {
  await post("/api/logout", {});
  csrf = "";
}

/**
 * @param {string} path
 * @returns {Promise<{ path: string, entries: Entry[], skipped: number }>}
 */
export async function list(path) {
  return parse(await fetch(url("/api/list", { path })));
}

/**
 * What a download of `path` sends: every level of a folder in one answer, each entry's `name`
 * its path (the folder's own name first), each folder before what is in it.
 * @param {string} path
 * @returns {Promise<{ path: string, entries: Entry[], skipped: number }>}
 */
export async function tree(path) {
  return parse(await fetch(url("/api/tree", { path })));
}

/** @param {string} path */
export const mkdir = (path) => post("/api/mkdir", { path });
/** @param {string} from @param {string} to */
export const rename = (from, to) => post("/api/rename", { from, to });
/** @param {string} path */
export const remove = (path) => post("/api/delete", { path });

/**
 * How to reach the server's WebTransport side: a URL with a one-time ticket of this login, the
 * SHA-256 (hex) of its certificate, and the block size and streams a transfer uses.
 * @returns {Promise<{ url: string, hashes: string[], block_bytes: number, streams: number, lanes?: number }>}
 */
export const webtransport = () => post("/api/wt", {});

/**
 * The URL a file downloads from (Range requests resume it), paced by the server to `rateBps`
 * (bits per second; 0: only the token's limit).
 * @param {string} path
 * @param {number} [rateBps]
 */
export const fileUrl = (path, rateBps = 0) =>
  url("/api/file", rateBps ? { path, rate_bps: rateBps } : { path });

/**
 * @param {string} path
 * @param {number} size
 * @param {number} mtime
 * @returns {Promise<UploadStatus>}
 */
export async function uploadStatus(path, size, mtime) {
  return parse(await fetch(url("/api/upload", { path, size, mtime })));
}

/**
 * The server's BLAKE3 of a file, and the ETag of the version it hashed.
 * @param {string} path
 * @returns {Promise<{ blake3: string, etag: string }>}
 */
export async function fileHash(path) {
  return parse(await fetch(url("/api/hash", { path })));
}

/**
 * Stops the server's requests writing that upload (a cancel: the server would otherwise read on
 * what the connection still holds).
 * @param {{ path: string, size: number, mtime: number }} spec
 */
export async function stopUpload(spec) {
  const response = await fetch(url("/api/upload/stop", spec), {
    method: "POST",
    headers: { "X-Sluice-CSRF": csrf },
  });
  return parse(response);
}

/**
 * Sends `blob` (the file's bytes from `offset`) with progress, abortable; the server paces it
 * to `rate_bps` (0: only the token's limit), and stores the file only if the whole file hashes
 * to `blake3` (hex; `later`: the complete file waits for a request at its end that brings it).
 * @param {{ path: string, size: number, mtime: number, offset: number, policy: string, rate_bps: number }} spec
 * @param {Blob} blob
 * @param {string} blake3
 * @param {(sent: number) => void} progress
 * @param {AbortSignal} signal
 * @returns {Promise<any>}
 */
export function uploadPart(spec, blob, blake3, progress, signal) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("PUT", url("/api/upload", spec));
    xhr.setRequestHeader("X-Sluice-CSRF", csrf);
    xhr.setRequestHeader("Content-Type", "application/octet-stream");
    xhr.setRequestHeader("X-Sluice-Blake3", blake3);
    xhr.upload.onprogress = (e) => progress(e.loaded);
    xhr.onload = () => {
      const response = new Response(xhr.responseText, { status: xhr.status });
      parse(response).then(resolve, reject);
    };
    xhr.onerror = () => reject(new ApiError(0, "network", "the connection failed"));
    xhr.onabort = () => reject(new ApiError(0, "cancelled", "cancelled"));
    if (signal.aborted) {
      reject(new ApiError(0, "cancelled", "cancelled"));
      return;
    }
    signal.addEventListener("abort", () => xhr.abort(), { once: true });
    xhr.send(blob);
  });
}

/**
 * The sweep's download: `bytes` bytes of nothing from the server, read to the end.
 * @param {number} bytes
 */
export async function sweepDown(bytes) {
  const response = await fetch(url("/api/sweep", { bytes }));
  if (!response.ok) await parse(response);
  const got = (await response.arrayBuffer()).byteLength;
  if (got !== bytes) throw new ApiError(0, "short", `${got} of ${bytes} bytes came`);
}

/**
 * The sweep's upload: `bytes` bytes the server drops and counts.
 * @param {number} bytes
 */
export async function sweepUp(bytes) {
  const response = await fetch("/api/sweep", {
    method: "PUT",
    headers: { "X-Sluice-CSRF": csrf, "Content-Type": "application/octet-stream" },
    body: new Uint8Array(bytes),
  });
  const body = await parse(response);
  if (body.received !== bytes) throw new ApiError(0, "short", `the server got ${body.received} of ${bytes} bytes`);
}

// Other servers in the panes, and copies between servers (crates/sluice-cli/src/web/servers.rs).
// A server is named by its id; "" is this server.

/** @typedef {{ id: string, label: string, fingerprint: string }} OtherServer */
/**
 * @typedef {{ kind: string, id: string, from: string, dest: string, phase: string, bytes: number,
 *   total: number, files: number, started: number, ended?: number, error?: string }} Job
 */

/** @returns {Promise<{ available: boolean, servers: OtherServer[] }>} */
export async function servers() {
  return parse(await fetch("/api/servers"));
}

/**
 * Connects this server to another, with the token that server gave the user and its fingerprint
 * pinned.
 * @param {string} address
 * @param {string} fingerprint
 * @param {string} token
 * @returns {Promise<OtherServer>}
 */
export const addServer = (address, fingerprint, token) =>
  post("/api/servers", { address, fingerprint, token });

/** @param {string} id */
export const forgetServer = (id) => post("/api/servers/forget", { id });

/**
 * @param {string} server
 * @param {string} path
 * @returns {Promise<{ path: string, entries: Entry[], skipped: number }>}
 */
export async function serverList(server, path) {
  return parse(await fetch(url("/api/servers/list", { server, path })));
}

/**
 * A copy from one server to another: a job on the destination.
 * @param {{ from: string, to: string, paths: string[], dest: string, overwrite: string }} copy
 * @returns {Promise<{ started?: boolean, done?: { job: string, files: number, bytes: number } }>}
 */
export const copyBetween = (copy) => post("/api/copy", copy);

/** @returns {Promise<{ servers: { server: string, label: string, jobs: Job[], error?: { error: string, message: string } }[] }>} */
export async function jobs() {
  return parse(await fetch("/api/jobs"));
}

/** @param {string} server @param {string} id */
export const cancelJob = (server, id) => post("/api/jobs/cancel", { server, id });
