// An upload run by the transfer machines, as a CLI upload is (docs/webtransport.md, "The page
// and sluice-session's machines"): this page runs `Sending` in its module (machines.js), the
// server runs `Receiving` on a `store` request's stream with the CLI's file plane, and their
// messages are the CLI's: the manifest of the file (or of a folder's small files, which go in one
// run: `storeFiles`), the server's plan by the overwrite policy
// with its resume offer (the BLAKE3 of each whole block a partial file of an earlier try holds,
// which the page compares with its file's), the digests, the repair rounds. The bytes go as
// pieces on the page's streams (wt.js, `push`), each within one block of the file, several at
// once over the page's lanes; the file's BLAKE3 is hashed while they go, and the server stores
// the file only once its own hash of what it wrote agrees. Then the server says, in a last head
// on the stream, the name the file was stored under (another under keep-both), as the HTTPS
// upload's answer does.

import * as api from "./api.js";
import { BLOCK, blockHashes } from "./hash.js";
import { Inbox, Machine, drive, openControl } from "./machines.js";
import { json } from "./wt.js";

/** How long the pieces still going may take once the server has every byte (`stop_data`). */
const GRACE_MS = 1000;
/** How long the server's last head may take once the machines are done. */
const LAST_HEAD_MS = 5000;

/**
 * @typedef {object} StoreOptions
 * @property {File} file
 * @property {string} dest the server's path for it
 * @property {string} policy the overwrite policy's name (or `keep-both`)
 * @property {number} rateBps a cap on the rate, 0 for none
 * @property {Promise<string>} hashing the file's BLAKE3, as it comes
 * @property {AbortSignal} signal
 * @property {(n: number) => void} progress bytes sent (negative: a piece cut off)
 * @property {(kept: number) => void} resumed what the server kept of an earlier try
 */

/**
 * @typedef {object} StoreManyOptions
 * @property {{ path: string, file: File }[]} files each file's manifest path (beneath `dir`,
 *   `/`-separated: its folders are listed in `dirs`) and its bytes
 * @property {string[]} dirs the folders of `files`' paths, each before those in it
 * @property {{ path: string } | { dir: string }} to the one file's own path, or the folder the
 *   files go into
 * @property {string} policy the overwrite policy's name (`keep-both`: one file only)
 * @property {number} rateBps a cap on the rate, 0 for none
 * @property {Promise<string>[]} hashing each file's BLAKE3, as it comes
 * @property {AbortSignal} signal
 * @property {(i: number, n: number) => void} progress bytes of file `i` sent (negative: a
 *   piece cut off)
 * @property {(i: number, kept: number) => void} resumed what the server kept of file `i` from an
 *   earlier try
 */

/**
 * `ranges` (of the file) cut into pieces that each lie within one of its blocks.
 * @param {[number, number][]} ranges
 * @returns {[number, number][]}
 */
export function cut(ranges) {
  /** @type {[number, number][]} */
  const pieces = [];
  for (const [a, b] of ranges) {
    for (let at = a; at < b; ) {
      const end = Math.min(b, (Math.floor(at / BLOCK) + 1) * BLOCK);
      pieces.push([at, end]);
      at = end;
    }
  }
  return pieces;
}

/**
 * Uploads `o.file` to `o.dest` by `o.policy`.
 * @param {import("./wt.js").Wt} wt
 * @param {StoreOptions} o
 * @returns {Promise<{ stored: boolean, resumed: number, repaired: number, name: string | null }>}
 *   `stored`: false when the policy kept the server's file; `name`: the stored file's, as the
 *   server said it
 */
export async function storeFile(wt, o) {
  const name = o.dest.split("/").pop() ?? o.dest;
  const done = await storeFiles(wt, {
    files: [{ path: name, file: o.file }], dirs: [], to: { path: o.dest }, policy: o.policy,
    rateBps: o.rateBps, hashing: [o.hashing], signal: o.signal,
    progress: (_, n) => o.progress(n), resumed: (_, kept) => o.resumed(kept),
  });
  const stored = done.stored[0];
  return { stored, resumed: done.resumed[0], repaired: done.repaired, name: stored ? done.last?.name ?? null : null };
}

/**
 * Uploads `o.files` in one run of the machines: one file to its own path, or several into a
 * folder (each by the policy: the server's plan says which move).
 * @param {import("./wt.js").Wt} wt
 * @param {StoreManyOptions} o
 * @returns {Promise<{ stored: boolean[], resumed: number[], repaired: number, last: any }>}
 *   `stored`: per file, false when the policy kept the server's; `last`: the server's last head
 */
export async function storeFiles(wt, o) {
  const mtime = (/** @type {File} */ f) => Math.floor(f.lastModified / 1000);
  const manifest = [
    ...o.dirs.map((path) => ({ path, kind: "dir", size: 0, mtime: Math.floor(Date.now() / 1000), mode: 0o755 })),
    ...o.files.map(({ path, file }) => ({ path, kind: "file", size: file.size, mtime: mtime(file), mode: 0o644 })),
  ];
  const machine = await Machine.sending(manifest);
  const inbox = new Inbox();
  // The server's last head (see `lastHead`) may come while this machine still waits for its
  // data to end, right behind the `Verified` it keeps for then: it is no message of the
  // machine's, so it is kept aside here, not handed to the machine (which would fail on it).
  /** @type {any} */
  let head = null;
  const post = inbox.post.bind(inbox);
  inbox.post = (item) => {
    const last = item.frame ? headOf(item.frame) : null;
    if (last) head = last;
    post(last ? { head: last } : item);
  };
  const tag = wt.tag();
  const cancelled = () => inbox.post({ cancelled: true });
  o.signal.addEventListener("abort", cancelled, { once: true });
  /** @type {Awaited<ReturnType<import("./wt.js").Wt["open"]>> | null} */
  let control = null;
  // The running phase: its number, and the stop of its pieces.
  /** @type {{ n: number, stop: AbortController } | null} */
  let phase = null;
  // The files the server wants (all until its plan says), laid end to end as the data is.
  let wanted = o.files.map((_, i) => i);
  /** @type {number[]} */
  let ends = [];
  let data = new Blob([]);
  const lay = () => {
    let end = 0;
    ends = wanted.map((i) => (end += o.files[i].file.size));
    data = new Blob(wanted.map((i) => o.files[i].file));
  };
  lay();
  const stored = o.files.map(() => true);
  const resumed = o.files.map(() => 0);
  try {
    if (o.signal.aborted) throw new api.ApiError(0, "cancelled", "cancelled");
    const rate = o.rateBps ? { rate_bps: o.rateBps } : {};
    const c = await openControl(wt, { op: "store", ...o.to, policy: o.policy, tag, ...rate }, inbox);
    control = c;

    /**
     * Tells each wanted file's progress its part of `[a, b)` (of the files end to end).
     * @param {number} a
     * @param {number} b
     */
    const spread = (a, b) => {
      for (let k = ends.findIndex((end) => end > a); k >= 0 && k < ends.length; k += 1) {
        const start = k ? ends[k - 1] : 0;
        if (start >= b) break;
        o.progress(wanted[k], Math.min(b, ends[k]) - Math.max(a, start));
      }
    };

    /**
     * Sends `ranges` as phase `n`'s pieces, at most `wt.streams` at once; the first phase's
     * bytes are the progress (a repair's are not: they were counted once). A piece may span
     * several small files: the server writes it across them, as the CLI's packets are.
     * @param {number} n
     * @param {[number, number][]} ranges
     * @param {AbortSignal} stop
     */
    const send = async (n, ranges, stop) => {
      const pieces = cut(ranges);
      let next = 0;
      const worker = async () => {
        while (next < pieces.length && !stop.aborted) {
          const [a, b] = pieces[next++];
          const bytes = new Uint8Array(await data.slice(a, b).arrayBuffer());
          await wt.push(tag, n, a, bytes, () => { if (n === 0) spread(a, b); }, stop);
        }
      };
      await Promise.all(Array.from({ length: Math.min(wt.streams, pieces.length) }, worker));
    };

    const done = await drive(machine, inbox, c, "the upload's control stream", {
      act: async (j) => {
        if (j.wanted) {
          wanted = j.wanted.files;
          for (let i = 0; i < stored.length; i += 1) stored[i] = wanted.includes(i);
          lay();
        } else if (j.check_resume) {
          // The leading blocks the server holds that each offered file has too.
          const kept = [];
          for (const [k, theirs] of j.check_resume) {
            const i = wanted[k];
            const file = o.files[i].file;
            const mine = await blockHashes(file, theirs.length, o.signal);
            let same = 0;
            while (same < theirs.length && theirs[same] === mine[same]) same += 1;
            resumed[i] = Math.min(file.size, same * BLOCK);
            if (resumed[i]) o.resumed(i, resumed[i]);
            kept.push(resumed[i]);
          }
          machine.event({ resume_checked: { kept } });
        } else if (j.start_data) {
          const s = j.start_data;
          const stop = new AbortController();
          phase = { n: s.phase, stop };
          send(s.phase, s.ranges, stop.signal).then(
            () => inbox.post({ sent: s.phase }),
            (e) => inbox.post(stop.signal.aborted ? { sent: s.phase } : { pushFailed: e }));
        } else if (j === "hash_files") {
          Promise.all(wanted.map((i) => o.hashing[i]))
            .then((hexes) => inbox.post({ hashed: hexes }), (e) => inbox.post({ hashFailed: e }));
        } else if (j === "stop_data") {
          // The server has every byte: the pieces still going end, or stop after a grace.
          const p = phase;
          setTimeout(() => p?.stop.abort(), GRACE_MS);
        } else if (j === "cancel_data") {
          phase?.stop.abort();
          phase = null;
        } else if (j.hash_blocks) {
          const hashed = [];
          for (const k of j.hash_blocks) {
            const i = wanted[k];
            if (i === undefined) throw new Error(`the machine asked for the blocks of file ${k} of ${wanted.length}`);
            hashed.push(await blockHashes(o.files[i].file, null, o.signal));
          }
          machine.event({ blocks_hashed: { hashed } });
        }
        // "stop_hashing": the hashes are the caller's, and go on.
      },
      take: (item) => {
        if (item.pushFailed) {
          const why = String(item.pushFailed?.message ?? item.pushFailed);
          machine.event({ failure: { code: "network", message: `the upload's pieces failed: ${why}` } });
        } else if (item.hashFailed) {
          const why = String(item.hashFailed?.message ?? item.hashFailed);
          machine.event({ failure: { code: "io", message: `a file could not be read: ${why}` } });
        } else if (item.hashed) {
          machine.event({ hashed: { hashes: item.hashed } });
        } else if (item.sent !== undefined && phase?.n === item.sent) {
          phase = null;
          machine.event({ data_ended: { phase: item.sent } });
        }
      },
    });
    const last = head ?? await lastHead(inbox);
    control = null;
    return { stored, resumed, repaired: done.repaired, last };
  } finally {
    o.signal.removeEventListener("abort", cancelled);
    // (Set in the machine's effects: `drive` ran them.)
    /** @type {{ stop: AbortController } | null} */ (phase)?.stop.abort();
    control?.cancel();
    machine.end();
  }
}

/**
 * A frame that is the server's last head (`{stored, ...}`, no message's `type`), or null.
 * @param {Uint8Array} frame
 */
function headOf(frame) {
  try {
    const head = json(frame.subarray(4));
    return head && typeof head === "object" && !("type" in head) && "stored" in head ? head : null;
  } catch {
    return null;
  }
}

/**
 * The server's last head on an upload's stream once the machines are done (`{stored, name}`,
 * conn.rs, as `headOf` took it from the inbox): null when the stream ends or fails first, or
 * another frame or none came in time.
 * @param {Inbox} inbox
 * @returns {Promise<{ stored: boolean, name?: string } | null>}
 */
async function lastHead(inbox) {
  const until = performance.now() + LAST_HEAD_MS;
  for (;;) {
    const item = await inbox.next(until - performance.now());
    if (item === null || item.finished || item.failed) return null;
    if (item.head) return item.head;
    // The file is stored whatever this says: a head not understood names nothing.
    if (item.frame) return null;
    // The pieces' ends, and a cancel: the upload is done.
  }
}
