// A download of several small files in one run of the transfer machines (batches.js): the server
// runs `Sending` of the folder asked for, this page's `Receiving` plans the files it was asked
// to fetch (each named by its path in the server's manifest; the others stay there), and the
// pieces come as for one file (fetch.js): each within one file, written at its place. A file of
// at most one block comes as one piece, hashed whole as it lands; any other is read back for its
// hash. The machine compares each file's BLAKE3 with the server's, and only then are the files
// moved into place. Nothing is offered for resume: a small file moves again whole, as the CLI's
// files under 8 MiB do.

import * as api from "./api.js";
import { blockHashes, hashBlob, hashBytes } from "./hash.js";
import { Inbox, Machine, failure, nextItem, openControl } from "./machines.js";

/**
 * @typedef {object} SmallFile
 * @property {string} path its path in the server's manifest (beneath the folder asked for,
 *   whose own name comes first)
 * @property {FileSystemFileHandle} part its partial file (emptied, then written)
 * @property {() => Promise<void>} place moves the verified partial file into place
 */

/**
 * @typedef {object} FetchSmallOptions
 * @property {string} src the server's folder the files are in
 * @property {SmallFile[]} files
 * @property {boolean} early they are every file of `src`: its data starts right behind the
 *   manifest (a round trip saved; the machine declines it if the manifest says otherwise)
 * @property {number} rateBps a cap on the rate, 0 for none
 * @property {AbortSignal} signal
 * @property {(i: number, n: number) => void} progress bytes of file `i` received
 * @property {(i: number, size: number) => void} sized file `i`'s size as the manifest says
 */

/**
 * Downloads `o.files` of `o.src` and, verified, moves each into place.
 * @param {import("./wt.js").Wt} wt
 * @param {FetchSmallOptions} o
 * @returns {Promise<boolean[]>} per file, whether the server had it (and it was placed)
 */
export async function fetchSmall(wt, o) {
  const machine = await Machine.receiving(o.early);
  const inbox = new Inbox();
  const tag = wt.route({
    piece: (phase, offset, bytes) => inbox.post({ piece: { phase, offset, bytes } }),
    progress: () => {},
  });
  const cancelled = () => inbox.post({ cancelled: true });
  o.signal.addEventListener("abort", cancelled, { once: true });
  /** @type {Awaited<ReturnType<import("./wt.js").Wt["open"]>> | null} */
  let control = null;
  // The wanted files (indices into `o.files`), their ends laid end to end, and each one's
  // BLAKE3 once a piece brought it whole.
  /** @type {number[]} */
  let wanted = [];
  /** @type {number[]} */
  let ends = [];
  /** @type {(string | null)[]} */
  let hexes = [];
  // The wanted files written to so far, and the writes under way.
  const begun = new Set();
  /** @type {Promise<void>[]} */
  const writing = [];
  const found = o.files.map(() => false);
  /** @type {{ n: number, left: number, ends: number[] } | null} */
  let running = null;
  /** @type {{ phase: number, offset: number, bytes: Uint8Array }[]} */
  let early = [];
  try {
    if (o.signal.aborted) throw new api.ApiError(0, "cancelled", "cancelled");
    const head = { op: "fetch", paths: [o.src], tag, early: o.early, ...(o.rateBps ? { rate_bps: o.rateBps } : {}) };
    const c = await openControl(wt, head, inbox);
    control = c;

    /** @param {number} k a wanted file */
    const start = (k) => (k ? ends[k - 1] : 0);

    /**
     * Writes a piece to its file; the writes of a phase go on side by side (each file's storage
     * work is the browser's, a round of its own), and `received` waits for them.
     * @param {{ phase: number, offset: number, bytes: Uint8Array }} p
     */
    const write = (p) => {
      if (!running) throw new Error("a piece with no phase running");
      const k = ends.findIndex((end) => end > p.offset);
      if (k < 0 || p.offset + p.bytes.length > ends[k]) throw new Error("a piece outside one file");
      const at = p.offset - start(k);
      // A file's first piece empties what an earlier try left (see the module's doc).
      const keep = begun.has(k);
      begun.add(k);
      if (running.n === 0) o.progress(wanted[k], p.bytes.length);
      running.left -= p.bytes.length;
      const written = (async () => {
        const out = await o.files[wanted[k]].part.createWritable({ keepExistingData: keep });
        await out.write({ type: "write", position: at, data: /** @type {any} */ (p.bytes) });
        await out.close();
        hexes[k] = at === 0 && p.bytes.length === ends[k] - start(k) ? await hashBytes(p.bytes) : null;
      })();
      written.catch(() => {}); // its failure is the run's, when `received` waits for it
      writing.push(written);
    };

    /** @param {any[]} entries the manifest */
    const plan = async (entries) => {
      const files = entries.filter((e) => e.kind === "file");
      const asked = new Map(o.files.map((f, i) => [f.path, i]));
      const numbers = [];
      wanted = [];
      for (const [n, e] of files.entries()) {
        const i = asked.get(e.path);
        if (i === undefined) continue;
        numbers.push(n);
        wanted.push(i);
        found[i] = true;
        o.sized(i, e.size);
      }
      let end = 0;
      ends = numbers.map((n) => (end += files[n].size));
      hexes = wanted.map(() => null);
      machine.event({ planned: { files: numbers, offers: [] } });
    };

    /** Every byte of the phase is in: the hashes of the files ending in it. */
    const received = async () => {
      const p = /** @type {{ n: number, left: number, ends: number[] }} */ (running);
      await Promise.all(writing.splice(0));
      const hashes = [];
      // The files ending at `p.ends`, in order (an empty file ends where the one before it does).
      let next = 0;
      for (const end of p.ends) {
        let k = next;
        while (k < ends.length && ends[k] !== end) k += 1;
        if (k === ends.length) throw new Error(`no file of this download ends at ${end}`);
        next = k + 1;
        // An empty file had no piece: what an earlier try left goes.
        if (!begun.has(k)) await (await o.files[wanted[k]].part.createWritable()).close();
        begun.add(k);
        const file = await o.files[wanted[k]].part.getFile();
        hashes.push(hexes[k] ?? await hashBlob(file, undefined, o.signal));
      }
      machine.event({ received: { phase: p.n, hashes } });
      machine.event({ data_ended: { phase: p.n } });
      running = null;
    };

    /** @param {{ expected: string[], actual: string[] }} c each file's BLAKE3, the server's and this page's */
    const commit = async (c) => {
      if (c.expected.join() !== c.actual.join()) {
        const message = "BLAKE3 mismatch: nothing was stored";
        machine.event({ committed: { code: "integrity", message } });
        return;
      }
      try {
        await Promise.all(wanted.map((i) => o.files[i].place()));
        machine.event({ committed: {} });
      } catch (e) {
        machine.event({ committed: { code: "io", message: String(/** @type {Error} */ (e)?.message ?? e) } });
      }
    };

    const state = { peerOpen: true, what: "the download's stream" };
    for (;;) {
      for (let e = machine.effect(); e; e = machine.effect()) {
        if ("frame" in e) {
          await c.writer.write(e.frame);
          continue;
        }
        const j = e.json;
        if (j.plan) await plan(j.plan);
        else if (j.bind) machine.event({ bound: { phase: j.bind.phase } });
        else if (j.start_data) {
          const s = j.start_data;
          /** @type {[number, number][]} */
          const present = s.present;
          const [a, b] = s.span;
          running = { n: s.phase, left: b - a - present.reduce((n, [x, y]) => n + y - x, 0), ends: s.ends };
          const now = early.filter((p) => p.phase === s.phase);
          early = early.filter((p) => p.phase > s.phase);
          for (const p of now) write(p);
        } else if (j.hash_blocks) {
          await Promise.all(writing.splice(0));
          const hashed = [];
          for (const k of j.hash_blocks) {
            const file = await o.files[wanted[k]].part.getFile();
            hashed.push(await blockHashes(file, null, o.signal));
          }
          machine.event({ blocks_hashed: { hashed } });
        } else if (j.commit) await commit(j.commit);
        else if (j.done?.ok) {
          await c.writer.close().catch(() => {});
          control = null;
          return found;
        } else if (j.done?.error) throw failure(j.done.error);
        // "stop_data" and "drop_early": nothing runs here that they would stop.
      }
      if (running?.left === 0) {
        await received();
        continue;
      }
      const item = await nextItem(machine, inbox, state);
      if (item?.piece) {
        if (running && item.piece.phase === running.n) write(item.piece);
        else early.push(item.piece);
      }
    }
  } finally {
    o.signal.removeEventListener("abort", cancelled);
    wt.unroute(tag);
    control?.cancel();
    machine.end();
  }
}
