// Transfers over WebTransport (HTTP/3 over QUIC; the server's side is
// crates/sluice-cli/src/web/wt/). The page asks the API for the session's URL (with a one-time
// ticket of its login) and the certificate's hash (a self-signed server is pinned by it), and
// connects once. Downloads and uploads are run by the transfer machines (fetch.js, store.js):
// a control stream (`fetch`, `store`) carries the machines' messages; a download's bytes come on
// the server's streams, which `Wt` hands to the download they name (`route`), and an upload's
// go as `piece` requests on the page's lanes (`push`).
// Where WebTransport is missing or does not connect, the caller falls back to HTTPS.

import * as api from "./api.js";

/** How long a connection may take before HTTPS is used instead. */
const CONNECT_MS = 5000;

/**
 * Where a download takes its pieces: `progress` as their bytes come (negative: a piece cut
 * off), by the phase and offset of their piece; `piece` once one is whole; both only while it is
 * routed.
 * @typedef {{ piece: (phase: number, offset: number, bytes: Uint8Array) => void, progress: (phase: number, offset: number, n: number) => void }} Route
 */

/** Bytes of the head of a piece's stream (push.rs): tag, phase, offset, length. */
const PIECE_HEAD = 24;

/** Reads exact byte counts from a stream. */
class Reader {
  /** @param {ReadableStreamDefaultReader<Uint8Array>} reader */
  constructor(reader) {
    this.reader = reader;
    /** @type {Uint8Array} */
    this.left = new Uint8Array(0);
  }

  /**
   * Fills `into` from the stream.
   * @param {Uint8Array} into
   * @param {(n: number) => void} [progress]
   */
  async fill(into, progress) {
    let at = 0;
    while (at < into.length) {
      if (!this.left.length) {
        const { done, value } = await this.reader.read();
        if (done) throw new api.ApiError(0, "network", `the stream ended after ${at} of ${into.length} bytes`);
        this.left = value;
      }
      const n = Math.min(this.left.length, into.length - at);
      into.set(this.left.subarray(0, n), at);
      this.left = this.left.subarray(n);
      at += n;
      progress?.(n);
    }
    return into;
  }

  /**
   * A frame of the machines' messages, whole (4 bytes of length, then the message); null when
   * the stream ends before one begins.
   */
  async frame() {
    if (!this.left.length) {
      const { done, value } = await this.reader.read();
      if (done) return null;
      this.left = value;
    }
    const len = await this.fill(new Uint8Array(4));
    const frame = new Uint8Array(4 + new DataView(len.buffer).getUint32(0));
    frame.set(len);
    await this.fill(frame.subarray(4));
    return frame;
  }

  /** A head: 4 bytes of length, then JSON. */
  async head() {
    const len = new DataView((await this.fill(new Uint8Array(4))).buffer).getUint32(0);
    return json(await this.fill(new Uint8Array(len)));
  }
}

/**
 * A head's JSON (after its 4 bytes of length), as [`Reader.head`] and a frame already read
 * (`frame.subarray(4)`) carry it.
 * @param {Uint8Array} bytes
 */
export function json(bytes) {
  return JSON.parse(new TextDecoder().decode(bytes));
}

/** @param {any} head */
function frame(head) {
  const json = new TextEncoder().encode(JSON.stringify(head));
  const out = new Uint8Array(4 + json.length);
  new DataView(out.buffer).setUint32(0, json.length);
  out.set(json, 4);
  return out;
}

/** @param {any} head an answer: throws the server's error as over HTTPS */
function checked(head) {
  if (head && head.error) throw new api.ApiError(0, head.error, head.message ?? head.error, head);
  return head;
}

/** @param {string} hex */
function bytesOf(hex) {
  return new Uint8Array((hex.match(/../g) ?? []).map((h) => parseInt(h, 16)));
}

export class Wt {
  /**
   * @param {any[]} transports connected WebTransport sessions (lanes) of one login: the first
   *   carries the transfers' control streams, all of them their pieces
   * @param {{ streams: number }} info
   */
  constructor(transports, info) {
    this.transports = transports;
    this.transport = transports[0];
    // Pieces in flight per upload: `streams` per lane.
    this.streams = info.streams * transports.length;
    this.next = 0;
    this.closed = false;
    // The downloads waiting for the server's streams, by tag (`route`).
    /** @type {Map<number, Route>} */
    this.routes = new Map();
    this.tags = 0;
    /**
     * Where the server started these lanes' sending from (its path memory: what it kept of the
     * path after this browser's last download), or null: afresh (`remembered`).
     * @type {{ rate_bps: number, age_s: number } | null}
     */
    this.memory = null;
    /** Whether a download took the words of `memory` yet (the first one does). */
    this.memoryTold = false;
    for (const t of transports) this.accept(t).catch(() => {});
    // One lane closed (idle, the server restarted) closes them all: the next transfer connects
    // again.
    for (const t of transports) {
      t.closed.then(() => { this.closed = true; }, () => { this.closed = true; });
    }
  }

  /**
   * Hands the server's streams of a new tag to `route`: the tag.
   * @param {Route} route
   */
  route(route) {
    const tag = this.tag();
    this.routes.set(tag, route);
    return tag;
  }

  /** A new tag, for a transfer's pieces. */
  tag() {
    this.tags += 1;
    return this.tags;
  }

  /**
   * Sends a piece of an upload on a stream of its own on the next lane (a `piece` request: the
   * server's side is crates/sluice-cli/src/web/wt/gather.rs), answered once the server took it:
   * so no more than the pieces under way are in memory (a stream takes whatever is written at
   * once), and `progress` counts what the server took. A cancel (`signal`) aborts it, and the
   * server takes no part of it.
   * @param {number} tag
   * @param {number} phase
   * @param {number} offset
   * @param {Uint8Array} bytes
   * @param {(n: number) => void} progress
   * @param {AbortSignal} signal
   */
  async push(tag, phase, offset, bytes, progress, signal) {
    const head = { op: "piece", tag, phase, offset, len: bytes.length };
    await this.request(head, bytes, signal, this.lane());
    progress(bytes.length);
  }

  /**
   * Asks the server how these lanes started (a `path` request on the first lane, whose session
   * made the lanes' group): from its path memory, or afresh. A server that does not say is
   * taken as afresh.
   */
  async remembered() {
    const answer = await this.request({ op: "path" }, new Uint8Array(0), new AbortController().signal, this.transport)
      .catch(() => null);
    this.memory = answer?.memory ?? null;
  }

  /**
   * What the path memory start was, in words, once: for the first download on these lanes (asked
   * at its end, when the answer of `remembered`, asked beside it, is in).
   */
  memoryNote() {
    if (!this.memory || this.memoryTold) return null;
    this.memoryTold = true;
    return `started from path memory (${startWords(this.memory)})`;
  }

  /** @param {number} tag */
  unroute(tag) {
    this.routes.delete(tag);
  }

  /**
   * Takes the server's streams on `transport`, each a piece of a download (see
   * crates/sluice-cli/src/web/wt/push.rs): a head of tag, phase, offset and length, then the
   * bytes, read whole and handed to the download of that tag.
   * @param {any} transport
   */
  async accept(transport) {
    const streams = transport.incomingUnidirectionalStreams.getReader();
    for (;;) {
      const { done, value } = await streams.read();
      if (done) return;
      this.piece(value).catch(() => {});
    }
  }

  /** @param {ReadableStream<Uint8Array>} stream */
  async piece(stream) {
    const reader = new Reader(stream.getReader());
    const head = new DataView((await reader.fill(new Uint8Array(PIECE_HEAD))).buffer);
    const tag = Number(head.getBigUint64(0));
    const phase = head.getUint32(8);
    const offset = Number(head.getBigUint64(12));
    const len = head.getUint32(20);
    const route = this.routes.get(tag);
    if (!route) {
      await reader.reader.cancel();
      return;
    }
    let got = 0;
    // A download that ended (cut off, cancelled, a probe run out: the server resets the pieces
    // it had under way) counts nothing more: its next try counts from what its file kept, and
    // these pieces' late bytes and cuts would change that try's count.
    const routed = () => this.routes.get(tag) === route;
    try {
      const bytes = await reader.fill(new Uint8Array(len), (n) => {
        got += n;
        if (routed()) route.progress(phase, offset, n);
      });
      if (routed()) route.piece(phase, offset, bytes);
    } catch (e) {
      // Cut off: its bytes are not the piece (the machines ask again for what is missing).
      if (routed()) {
        route.progress(phase, offset, -got);
        console.warn("a piece of a download was cut off:", e);
      }
    }
  }

  /**
   * A request whose answer is not a head: its stream, the head written, kept open both ways.
   * @param {any} head
   * @returns {Promise<{ writer: WritableStreamDefaultWriter<Uint8Array>, reader: Reader, cancel: () => void }>}
   */
  async open(head) {
    const { writer, reader, cancel } = await this.stream(this.transport);
    try {
      await writer.write(frame(head));
    } catch (e) {
      cancel();
      throw e;
    }
    return { writer, reader, cancel };
  }

  /**
   * A new bidirectional stream on `transport`: its two ends, and a cancel of both.
   * @param {any} transport
   */
  async stream(transport) {
    const stream = await transport.createBidirectionalStream();
    const writer = stream.writable.getWriter();
    const reader = new Reader(stream.readable.getReader());
    const cancel = () => {
      writer.abort().catch(() => {});
      reader.reader.cancel().catch(() => {});
    };
    return { writer, reader, cancel };
  }

  /** The lane for the next block, in turn. */
  lane() {
    this.next = (this.next + 1) % this.transports.length;
    return this.transports[this.next];
  }

  /**
   * A request on a new stream of `via`: its head and `body` sent and the stream's sending end
   * closed, its answer's head read (the server's error thrown as over HTTPS). A cancel
   * (`signal`) aborts both ends.
   * @param {any} head
   * @param {Uint8Array} body
   * @param {AbortSignal} signal
   * @param {any} via the session to send it on
   */
  async request(head, body, signal, via) {
    const { writer, reader, cancel } = await this.stream(via);
    const cancelled = () => new api.ApiError(0, "cancelled", "cancelled");
    if (signal.aborted) {
      cancel();
      throw cancelled();
    }
    signal.addEventListener("abort", cancel, { once: true });
    try {
      try {
        await writer.write(frame(head));
        await writer.write(body);
        await writer.close();
      } catch (e) {
        // The server may have refused the request before reading all of it: its answer says why.
        const answer = signal.aborted ? null : await reader.head().catch(() => null);
        if (answer?.error) checked(answer);
        throw e;
      }
      return checked(await reader.head());
    } catch (e) {
      cancel();
      if (signal.aborted) throw cancelled();
      throw e;
    } finally {
      // One listener per request: a long upload's pieces share one signal.
      signal.removeEventListener("abort", cancel);
    }
  }
}

/**
 * A start from path memory in words: "80 Mbit/s, kept 3 min ago".
 * @param {{ rate_bps: number, age_s: number }} m
 */
export function startWords(m) {
  const age = m.age_s < 90 ? `${m.age_s} s` : m.age_s < 5400 ? `${Math.round(m.age_s / 60)} min` : `${Math.round(m.age_s / 3600)} h`;
  return `${Math.round(m.rate_bps / 1e6)} Mbit/s, kept ${age} ago`;
}

/** @type {Promise<Wt | null> | null} */
let connecting = null;
/** When the last try to connect failed: HTTPS is used without trying again for a while. */
let failedAt = -Infinity;
/** How long after a failed try the next one waits (so a blocked UDP port costs one wait). */
const RETRY_MS = 60000;

/**
 * Says how transfers go, on the page.
 * @param {string} text
 * @param {boolean} wt
 */
function say(text, wt) {
  const where = document.getElementById("transport");
  if (!where) return;
  where.textContent = text;
  where.dataset.transport = wt ? "webtransport" : "https";
}

/**
 * How the panel says transfers go ("auto" when it says nothing else).
 * @returns {import("./choose.js").Mode}
 */
export function mode() {
  const select = /** @type {HTMLSelectElement | null} */ (document.getElementById("transport-mode"));
  const chosen = select?.value;
  return chosen === "https" || chosen === "webtransport" ? chosen : "auto";
}

/** Whether the user lets transfers use WebTransport. */
function wanted() {
  return mode() !== "https";
}

/**
 * One WebTransport session, with a ticket of its own, of the lanes named `page` (the server sends
 * a download's pieces on the sessions of the page that asked for it, and no other's).
 * @param {any} W the browser's WebTransport class
 * @param {string} page
 * @param {any} [info] the API's answer for it (else asked now)
 */
async function open(W, page, info) {
  info ??= await api.webtransport();
  const transport = new W(`${info.url}&page=${page}`, {
    serverCertificateHashes: info.hashes.map((/** @type {string} */ h) => ({ algorithm: "sha-256", value: bytesOf(h) })),
  });
  /** @type {any} */
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error("no answer in time")), CONNECT_MS);
  });
  try {
    await Promise.race([transport.ready, late]);
  } catch (e) {
    transport.close?.();
    throw e;
  } finally {
    clearTimeout(timer);
  }
  return transport;
}

/**
 * Connects to the server's WebTransport side: the sessions (lanes) it offers, at least one.
 * @param {any} W the browser's WebTransport class
 * @returns {Promise<Wt | null>}
 */
async function connect(W) {
  try {
    let info = await api.webtransport();
    const page = crypto.randomUUID();
    /** @type {any} */
    let first;
    try {
      first = await open(W, page, info);
    } catch (e) {
      // The server may have replaced its certificate between its answer and the handshake
      // (every 6 days): a new answer names the new hash. The same hash again: a real failure.
      const again = await api.webtransport();
      if (again.hashes.join() === info.hashes.join()) throw e;
      info = again;
      first = await open(W, page, info);
    }
    // The other lanes: one that does not connect only leaves fewer.
    const more = await Promise.all(Array.from({ length: Math.max(0, (info.lanes ?? 1) - 1) },
      () => open(W, page).catch((e) => { console.warn("a WebTransport lane did not connect:", e); return null; })));
    const wt = new Wt([first, ...more.filter((t) => t)], info);
    // Asked beside the first transfer, not before it (a round trip less); once the answer is
    // in, the line says it, if transfers still go over this session.
    wt.remembered().then(() => {
      if (wt.memory) connecting?.then((now) => { if (now === wt) connected(wt); });
    });
    return wt;
  } catch (e) {
    const why = e instanceof api.ApiError && e.code === "no-webtransport"
      ? "the server does not offer WebTransport"
      : `WebTransport did not connect (${/** @type {Error} */ (e).message ?? e})`;
    say(`Transfers go over HTTPS: ${why}.`, false);
    failedAt = performance.now();
    return null;
  }
}

/**
 * The WebTransport session, connected once (and again after it closed); null where it is
 * unavailable, switched off, or does not connect: then transfers go over HTTPS, and the page
 * says why.
 * @returns {Promise<Wt | null>}
 */
export async function session() {
  if (!wanted()) {
    say("Transfers go over HTTPS (chosen in the panel; WebTransport is switched off).", false);
    return null;
  }
  const W = /** @type {any} */ (globalThis).WebTransport;
  if (!W) {
    say("Transfers go over HTTPS: this browser has no WebTransport.", false);
    return null;
  }
  if (!connecting && performance.now() - failedAt < RETRY_MS) return null;
  connecting ??= connect(W);
  let wt = await connecting;
  if (wt?.closed) {
    // It closed since (idle, or the server restarted): once more.
    connecting = connect(W);
    wt = await connecting;
  }
  if (!wt) {
    connecting = null;
    return null;
  }
  connected(wt);
  return wt;
}

/**
 * Says on the page that transfers go over `wt`, and where its sending started from.
 * @param {Wt} wt
 */
function connected(wt) {
  const lanes = wt.transports.length;
  const memory = wt.memory ? `, sending from path memory at ${startWords(wt.memory)}` : "";
  const how = `HTTP/3 over QUIC, ${lanes} session${lanes > 1 ? "s" : ""}, ${wt.streams} streams per file${memory}`;
  if (mode() === "auto") say(`WebTransport is connected (${how}); each direction takes the faster of it and HTTPS, as measured on its transfers.`, true);
  else say(`Transfers go over WebTransport (${how}).`, true);
}

/**
 * Starts over (the user switched WebTransport on or off): the session there was closes, and,
 * when on, a new one connects now.
 */
export function retry() {
  failedAt = -Infinity;
  const old = connecting;
  connecting = null;
  old?.then((wt) => wt?.transports.forEach((t) => t.close?.()), () => {});
  return session();
}

/**
 * Forgets the session after a transfer on it failed, saying so: the next transfers go over
 * HTTPS for a while, then try to connect again.
 * @param {unknown} why
 */
export function failed(why) {
  console.warn("WebTransport failed:", why);
  connecting = null;
  failedAt = performance.now();
  say(`Transfers go over HTTPS: WebTransport failed (${/** @type {Error} */ (why)?.message ?? why}).`, false);
}
