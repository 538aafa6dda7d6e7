// A download run by the transfer machines, as a CLI download is (docs/webtransport.md, "The page
// and sluice-session's machines"): the server runs `Sending` of the path asked for on a `fetch`
// request's stream, this page runs `Receiving` in its module (machines.js), and their messages
// are the CLI's: the manifest, the page's plan with its resume offers (the BLAKE3 of each whole
// block a partial file holds), the digests, the repair rounds. One file asked for by its own
// path, or several of a folder (batches.js: each named by its path in the server's manifest; the
// others stay there), go the same way. The page does what its machine asks: the bytes come as
// pieces on the server's streams (wt.js, `route`), each within one file, written at its place in
// that file's partial file (each file's writes in order, the files' side by side) and hashed as
// they land: a file of one block as its one piece, a larger one block by block in its BLAKE3
// tree (hash.js, `Tree`), so its hash is there when its last piece is, without reading the file
// again. The machine compares each file's hash with the server's, and the page moves the files
// into place only when they agree.

import * as api from "./api.js";
import { BLOCK, Tree, blockHashes, hashBlob, hashBytes } from "./hash.js";
import { Inbox, Machine, drive, openControl } from "./machines.js";

/**
 * @typedef {object} Wanted
 * @property {string | null} path its path in the server's manifest (beneath the folder asked
 *   for, whose own name comes first); null: the one file the manifest lists (asked for by its own
 *   path; a folder's manifest is refused)
 * @property {FileSystemFileHandle} part its partial file: its whole blocks are offered for a
 *   resume, and what the server does not keep of it goes
 * @property {number} [have] the bytes of it the caller counted as done
 * @property {() => Promise<void>} place moves the verified partial file into place
 */

/**
 * @typedef {object} FetchOptions
 * @property {string} src the server's path asked for: the file, or the folder of the files
 * @property {Wanted[]} files
 * @property {boolean} every they are every file of `src`: when their partial files are empty,
 *   the data starts right behind the manifest (a round trip saved; the machine declines it if the
 *   manifest says otherwise)
 * @property {number} rateBps a cap on the rate, 0 for none
 * @property {AbortSignal} signal
 * @property {(i: number, n: number) => void} progress bytes of file `i` received (negative:
 *   counted before and not kept)
 * @property {(i: number, kept: number) => void} resumed what the server agreed file `i`'s
 *   partial file holds, when it holds anything
 * @property {(i: number, size: number) => void} sized file `i`'s size as the server's manifest
 *   says (the listing the caller had may be older)
 */

/** A wanted file in this run: where it lies among the files laid end to end, and its landing. */
class Landing {
  /**
   * @param {number} i its index in the caller's files
   * @param {Wanted} want
   * @param {number} start
   * @param {number} size
   */
  constructor(i, want, start, size) {
    this.i = i;
    this.want = want;
    this.start = start;
    this.size = size;
    this.end = start + size;
    /** What the partial file keeps from its start when it is next opened. */
    this.keep = 0;
    /** @type {FileSystemWritableFileStream | null} */
    this.out = null;
    /** Its writes, in order; a failure stays here until `settle`. */
    this.writes = Promise.resolve();
    /** @type {Tree | null} its blocks' hashes, a file of more than one block */
    this.tree = null;
    /** @type {string | null} the BLAKE3 of a file of one block, once its one piece (or offer) was whole */
    this.hex = null;
    /** Whether its hash came from what landed, not read back. */
    this.fromBlocks = true;
    /** @type {[number, number][]} the ranges of it the partial file holds, merged, in order */
    this.held = [];
    /** Whether its partial file was closed whole as its last byte landed (see `write`). */
    this.whole = false;
  }

  /**
   * Its resume offer: the BLAKE3 of each whole block (all of it when the partial file holds the
   * whole file) from its start, each added to its tree as the server may keep it.
   * @param {AbortSignal} signal
   */
  async offer(signal) {
    const kept = await this.want.part.getFile();
    const have = Math.min(kept.size, this.size);
    const offered = have === this.size ? have : have - (have % BLOCK);
    const hashes = [];
    for (let at = 0; at < offered; at += BLOCK) {
      if (signal.aborted) throw new api.ApiError(0, "cancelled", "cancelled");
      const bytes = new Uint8Array(await kept.slice(at, Math.min(at + BLOCK, this.size)).arrayBuffer());
      const hex = await hashBytes(bytes);
      await this.land(at, bytes, hex);
      hashes.push(hex);
    }
    return hashes;
  }

  /**
   * The hashing of what lands at `at`: a block of its tree, or a file of one block whole.
   * @param {number} at
   * @param {Uint8Array} bytes
   * @param {string} [hex] their BLAKE3, when known
   */
  async land(at, bytes, hex) {
    if (this.tree) {
      try {
        this.tree.add(at, bytes);
      } catch {
        // Not a whole block of the file: the tree then lacks it, and the file's hash comes
        // from reading the file at the end (`hash`).
      }
    } else if (this.size <= BLOCK) {
      this.hex = at === 0 && bytes.length === this.size ? hex ?? await hashBytes(bytes) : null;
    }
  }

  /** @param {number} a @param {number} b */
  hold(a, b) {
    this.held.push([a, b]);
    this.held.sort((x, y) => x[0] - y[0]);
    /** @type {[number, number][]} */
    const merged = [];
    for (const [x, y] of this.held) {
      const last = merged[merged.length - 1];
      if (last && x <= last[1]) last[1] = Math.max(last[1], y);
      else merged.push([x, y]);
    }
    this.held = merged;
  }

  /** The bytes from its start without a gap: what a cut-off download keeps. */
  prefix() {
    return this.held[0]?.[0] === 0 ? this.held[0][1] : 0;
  }

  /** Its partial file opened for writing, holding its first `keep` bytes. */
  async open() {
    const out = await this.want.part.createWritable({ keepExistingData: this.keep > 0 });
    if (this.keep) await out.truncate(this.keep);
    return out;
  }

  /**
   * Writes `bytes` at `at`, after its writes before.
   * @param {number} at
   * @param {Uint8Array} bytes
   */
  write(at, bytes) {
    this.writes = this.writes.then(async () => {
      this.out ??= await this.open();
      this.whole = false;
      await this.out.write({ type: "write", position: at, data: /** @type {any} */ (bytes) });
      await this.land(at, bytes);
      this.hold(at, at + bytes.length);
      if (this.prefix() >= this.size) {
        // Whole: closed now, beside the rest of the download, not with every other file at
        // the phase's end (200 small files' closes took 0.25 s there).
        const out = this.out;
        this.out = null;
        await out.close();
        this.keep = this.size;
        this.whole = true;
      }
    });
    this.writes.catch(() => {}); // its failure is the run's, at `settle`
  }

  /** Its writes done and its partial file closed, holding `keep` bytes when nothing came. */
  async settle() {
    await this.writes;
    if (this.whole) return;
    if (!this.out && (await this.want.part.getFile()).size !== this.keep) this.out = await this.open();
    const out = this.out;
    this.out = null;
    await out?.close();
    // All of it is there: a repair's run writes into it as it is.
    this.keep = this.size;
  }

  /**
   * Its BLAKE3, from what landed or read back (settled).
   * @param {AbortSignal} signal
   */
  async hash(signal) {
    const hex = this.tree ? this.tree.hex() : this.hex;
    if (hex) return hex;
    this.fromBlocks = false;
    return hashBlob(await this.want.part.getFile(), undefined, signal);
  }

  /** Cut off: the partial file keeps its bytes from its start up to the first gap. */
  async cut() {
    await this.writes.catch(() => {});
    const out = this.out;
    this.out = null;
    if (out) {
      await out.truncate(this.prefix()).catch(() => {});
      await out.close().catch(() => {});
    }
    this.tree?.drop();
    this.tree = null;
  }
}

/**
 * Downloads `o.files` of `o.src` and, verified, moves each into place.
 * @param {import("./wt.js").Wt} wt
 * @param {FetchOptions} o
 * @returns {Promise<{ found: boolean[], resumed: number, repaired: number, fromBlocks: boolean }>}
 *   `found`: per file, whether the server had it (and it was placed); `fromBlocks`: every file's
 *   hash came from what landed
 */
export async function fetchFiles(wt, o) {
  const empty = await Promise.all(o.files.map(async (f) => (await f.part.getFile()).size === 0));
  const fresh = o.every && empty.every(Boolean);
  const machine = await Machine.receiving(fresh);
  const inbox = new Inbox();
  // What this run told of each file: a run cut off tells at its end what makes the count what
  // the file's partial file keeps (pieces are counted as they come, and some are not kept).
  const told = o.files.map(() => 0);
  /** @param {number} i @param {number} n */
  const progress = (i, n) => {
    told[i] += n;
    o.progress(i, n);
  };
  /** @type {Landing[]} the wanted files, in the manifest's order */
  let files = [];
  // The bytes of phase 0 are counted as they come; by their piece's offset, those that came
  // before the plan said whose they are. A declined early start takes back all that was told
  // (until then only phase 0's bytes: its data then comes in another phase, counted as its
  // pieces land).
  /** @type {Map<number, number>} */
  const unsorted = new Map();
  let declined = false;
  /** @param {number} offset @param {number} n */
  const count = (offset, n) => {
    const f = files.find((f) => f.end > offset);
    if (f) progress(f.i, n);
    else unsorted.set(offset, (unsorted.get(offset) ?? 0) + n);
  };
  const tag = wt.route({
    piece: (phase, offset, bytes) => inbox.post({ piece: { phase, offset, bytes } }),
    progress: (phase, offset, n) => { if (phase === 0 && !declined) count(offset, n); },
  });
  const cancelled = () => inbox.post({ cancelled: true });
  o.signal.addEventListener("abort", cancelled, { once: true });
  /** @type {Awaited<ReturnType<import("./wt.js").Wt["open"]>> | null} */
  let control = null;
  const found = o.files.map(() => false);
  // The running data phase, the first's number (0, or another after a declined early start),
  // and pieces of phases not yet started (they race the message that starts them).
  /** @type {{ n: number, left: number, ends: number[] } | null} */
  let run = null;
  /** @type {number | null} */
  let first = null;
  /** @type {{ phase: number, offset: number, bytes: Uint8Array }[]} */
  let early = [];
  let placed = false;
  try {
    if (o.signal.aborted) throw new api.ApiError(0, "cancelled", "cancelled");
    const head = { op: "fetch", paths: [o.src], tag, early: fresh, ...(o.rateBps ? { rate_bps: o.rateBps } : {}) };
    const c = await openControl(wt, head, inbox);
    control = c;

    /** @param {{ phase: number, offset: number, bytes: Uint8Array }} p a piece of the running phase */
    const take = (p) => {
      const f = files.find((f) => f.end > p.offset);
      if (!f || !run || p.offset + p.bytes.length > f.end) throw new Error("a piece outside one file");
      if (declined && run.n === first) progress(f.i, p.bytes.length);
      run.left -= p.bytes.length;
      f.write(p.offset - f.start, p.bytes);
    };

    /** @param {any[]} entries the manifest */
    const plan = async (entries) => {
      const listed = entries.filter((e) => e.kind === "file");
      const asked = new Map(o.files.map((f, i) => [f.path, i]));
      if (asked.has(null) && listed.length !== 1) {
        const message = `${o.src}: a download here is one file, and the server lists ${listed.length}`;
        machine.event({ failure: { code: "refused", message } });
        return;
      }
      const numbers = [];
      files = [];
      let end = 0;
      for (const [n, e] of listed.entries()) {
        const i = asked.get(asked.has(null) ? null : e.path);
        if (i === undefined) continue;
        numbers.push(n);
        found[i] = true;
        o.sized(i, e.size);
        files.push(new Landing(i, o.files[i], end, e.size));
        end += e.size;
      }
      /** @type {[number, string[]][]} */
      const offers = [];
      for (const [k, f] of files.entries()) {
        // (Too many trees at once: the file is read back for its hash.)
        if (f.size > BLOCK) f.tree = await Tree.create(f.size, "machines").catch(() => null);
        if (empty[f.i]) continue;
        const hashes = await f.offer(o.signal);
        if (hashes.length) offers.push([k, hashes]);
      }
      const before = [...unsorted];
      unsorted.clear();
      for (const [offset, n] of before) count(offset, n);
      machine.event({ planned: { files: numbers, offers } });
    };

    /** @param {any} s */
    const start = (s) => {
      const [a, b] = s.span;
      /** @type {[number, number][]} */
      const present = s.present;
      run = { n: s.phase, left: b - a - present.reduce((n, [x, y]) => n + y - x, 0), ends: s.ends };
      if (first === null) {
        first = s.phase;
        // What the server agreed each partial file holds: the rest of it goes.
        for (const f of files) {
          f.held = [];
          for (const [x, y] of present) if (x < f.end && y > f.start) f.hold(Math.max(x, f.start) - f.start, Math.min(y, f.end) - f.start);
          f.keep = f.prefix();
          progress(f.i, f.keep - (f.want.have ?? 0));
          if (f.keep) o.resumed(f.i, f.keep);
        }
      }
      const now = early.filter((p) => p.phase === s.phase);
      early = early.filter((p) => p.phase > s.phase);
      for (const p of now) take(p);
    };

    /** Every byte of the phase is in: the hashes of the files ending in it. */
    const received = async () => {
      const p = /** @type {{ n: number, left: number, ends: number[] }} */ (run);
      const hashes = [];
      // The files ending at `p.ends`, in order (an empty file ends where the one before it does).
      let next = 0;
      for (const end of p.ends) {
        let k = next;
        while (k < files.length && files[k].end !== end) k += 1;
        if (k === files.length) throw new Error(`no file of this download ends at ${end}`);
        next = k + 1;
        await files[k].settle();
        hashes.push(await files[k].hash(o.signal));
      }
      machine.event({ received: { phase: p.n, hashes } });
      machine.event({ data_ended: { phase: p.n } });
      run = null;
    };

    /** @param {number[]} which the files whose blocks the repair compares */
    const hashBlocks = async (which) => {
      const hashed = [];
      for (const k of which) {
        const f = files[k];
        if (!f) throw new Error(`the machine asked for the blocks of file ${k} of ${files.length}`);
        await f.settle();
        hashed.push(await blockHashes((await f.want.part.getFile()).slice(0, f.size), null, o.signal));
      }
      machine.event({ blocks_hashed: { hashed } });
    };

    /** @param {{ expected: string[], actual: string[] }} c each file's BLAKE3, the server's and this page's */
    const commit = async (c) => {
      if (c.expected.join() !== c.actual.join()) {
        const message = `BLAKE3 mismatch: this page has ${c.actual.join()}, the server ${c.expected.join()}; nothing was stored`;
        machine.event({ committed: { code: "integrity", message } });
        return;
      }
      try {
        await Promise.all(files.map((f) => f.settle()));
        await Promise.all(files.map((f) => f.want.place()));
        placed = true;
        machine.event({ committed: {} });
      } catch (e) {
        machine.event({ committed: { code: "io", message: String(/** @type {Error} */ (e)?.message ?? e) } });
      }
    };

    const done = await drive(machine, inbox, c, "the download's stream", {
      act: async (j) => {
        if (j.plan) await plan(j.plan);
        else if (j.start_data) start(j.start_data);
        else if (j.hash_blocks) await hashBlocks(j.hash_blocks);
        else if (j.commit) await commit(j.commit);
        else if (j === "drop_early") {
          declined = true;
          told.forEach((n, i) => { if (n) progress(i, -n); });
        }
        // "stop_data": nothing runs here that it would stop.
      },
      idle: async () => {
        if (run?.left !== 0) return false;
        await received();
        return true;
      },
      take: (item) => {
        if (!item.piece) return;
        if (run && item.piece.phase === run.n) take(item.piece);
        else early.push(item.piece);
      },
    });
    control = null;
    return { found, resumed: done.resumed, repaired: done.repaired, fromBlocks: files.every((f) => f.fromBlocks) };
  } finally {
    o.signal.removeEventListener("abort", cancelled);
    wt.unroute(tag);
    control?.cancel();
    for (const f of files) {
      if (placed) {
        f.tree?.drop();
        continue;
      }
      await f.cut();
      const kept = await f.want.part.getFile().then((b) => b.size, () => null);
      if (kept !== null) progress(f.i, kept - (f.want.have ?? 0) - told[f.i]);
    }
    machine.end();
  }
}
