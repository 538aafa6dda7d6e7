// Which way a transfer goes when the page chooses ("auto"): WebTransport or HTTPS, whichever
// moved this direction's bytes faster lately, as measured on this page's own transfers. Which is
// faster depends on the path and the machine: at 100 ms and 1 % loss Chromium's own QUIC
// uploaded at 0.3 MiB/s where HTTPS (the kernel's TCP) moved 24, and on a 2-core machine HTTPS
// downloads were faster too; on a clean fast path WebTransport's several streams can win. So
// each direction measures both: a file of at least PROBE_MIN_BYTES whose direction lacks a
// fresh figure for one of them spends at most PROBE_MS on it (a probe), then goes on from where
// it stopped (both ways resume) by the other, and later transfers take the faster. A figure
// older than STALE_MS is measured again. The figures are kept in the page's storage (its
// origin's localStorage), so a reload within STALE_MS does not pay for the probes again. No DOM
// here: web-tests/choose.test.mjs runs it in node.

/** @typedef {"wt" | "https"} Via */
/** @typedef {"up" | "down"} Dir */
/** @typedef {"auto" | "webtransport" | "https"} Mode */

/** The longest a probe runs before the transfer goes on by the other way. */
export const PROBE_MS = 3000;
/** Files smaller than this are not probed: they take the faster known way (WebTransport when none is known). */
export const PROBE_MIN_BYTES = 16 << 20;
/** A measurement older than this is taken again. */
export const STALE_MS = 10 * 60 * 1000;
/** Runs shorter than this measure nothing (a rate over a few packets says little). */
export const MEASURE_MIN_MS = 500;

/** Where the figures are kept in the page's storage. */
export const STORE_KEY = "sluice.transport-figures";

/** @typedef {Pick<Storage, "getItem" | "setItem">} Store */

export class Chooser {
  /**
   * @param {() => number} now milliseconds of the wall clock (Date.now in the page: the figures
   *   outlive the page)
   * @param {Store | null} [store] where the figures are kept between page loads (none: in memory)
   */
  constructor(now, store = null) {
    this.now = now;
    this.store = store;
    /** @type {Record<Dir, Partial<Record<Via, { rate: number, at: number }>>>} bytes per second */
    this.rates = { up: {}, down: {} };
    this.load();
  }

  /** Takes the kept figures that are well formed; anything else in the store is ignored. */
  load() {
    let kept;
    try {
      kept = JSON.parse(this.store?.getItem(STORE_KEY) ?? "null");
    } catch {
      return; // not JSON, or storage refused: measured again
    }
    for (const dir of /** @type {Dir[]} */ (["up", "down"])) {
      for (const via of /** @type {Via[]} */ (["wt", "https"])) {
        const f = kept?.[dir]?.[via];
        if (Number.isFinite(f?.rate) && f.rate >= 0 && Number.isFinite(f?.at)) {
          this.rates[dir][via] = { rate: f.rate, at: f.at };
        }
      }
    }
  }

  /** Keeps the figures for the next page load (a store that refuses is the same as none). */
  save() {
    try {
      this.store?.setItem(STORE_KEY, JSON.stringify(this.rates));
    } catch {
      // Full or refused: the figures live in this page only.
    }
  }

  /** Forgets every measurement (the page was switched to "auto" again). */
  reset() {
    this.rates = { up: {}, down: {} };
    this.save();
  }

  /**
   * A run of `via` in `dir` moved `bytes` in `ms`.
   * @param {Dir} dir
   * @param {Via} via
   * @param {number} bytes
   * @param {number} ms
   */
  record(dir, via, bytes, ms) {
    // A run long enough that moved nothing is a figure too (0): WebTransport uploads commit
    // whole blocks of 4 MiB, and on a long lossy path a probe may end before the first.
    if (!(ms >= MEASURE_MIN_MS) || !(bytes >= 0)) return;
    this.rates[dir][via] = { rate: (bytes * 1000) / ms, at: this.now() };
    this.save();
  }

  /**
   * The fresh figure of `via` in `dir`, bytes per second.
   * @param {Dir} dir
   * @param {Via} via
   * @returns {number | null}
   */
  rate(dir, via) {
    const r = this.rates[dir][via];
    if (!r) return null;
    // A figure from the future (the clock was set back) is as good as stale.
    const age = this.now() - r.at;
    return age >= 0 && age < STALE_MS ? r.rate : null;
  }

  /**
   * How the next run of a transfer in `dir` with `left` bytes to move goes.
   * @param {Mode} mode
   * @param {Dir} dir
   * @param {number} left
   * @param {boolean} wtReady whether a WebTransport session is connected
   * @returns {{ via: Via, probe: boolean }} probe: stop after PROBE_MS and ask again
   */
  plan(mode, dir, left, wtReady) {
    if (!wtReady || mode === "https") return { via: "https", probe: false };
    if (mode === "webtransport") return { via: "wt", probe: false };
    const wt = this.rate(dir, "wt");
    const https = this.rate(dir, "https");
    if (left >= PROBE_MIN_BYTES) {
      if (wt === null) return { via: "wt", probe: true };
      if (https === null) return { via: "https", probe: true };
    }
    if (wt !== null && https !== null) return { via: https > wt ? "https" : "wt", probe: false };
    if (https !== null && wt === null) return { via: "https", probe: false };
    return { via: "wt", probe: false };
  }
}
