// An upload run by the transfer machines, as a CLI upload is (docs/webtransport.md, "The page
// and sluice-session's machines"): this page runs `Sending` in its module (machines.js), the
// server runs `Receiving` on a `store` request's stream with the CLI's file plane, and their
// messages are the CLI's: the manifest of the file, the server's plan by the overwrite policy
// with its resume offer (the BLAKE3 of each whole block a partial file of an earlier try holds,
// which the page compares with its file's), the digests, the repair rounds. The bytes go as
// pieces on the page's streams (wt.js, `push`), each within one block of the file, several at
// once over the page's lanes; the file's BLAKE3 is hashed while they go, and the server stores
// the file only once its own hash of what it wrote agrees. Then the server says, in a last head
// on the stream, the name the file was stored under (another under keep-both), as the HTTPS
// upload's answer does.

import * as api from "./api.js";
import { BLOCK, blockHashes } from "./hash.js";
import { Inbox, Machine, failure, nextItem, openControl } from "./machines.js";
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
  const size = o.file.size;
  const name = o.dest.split("/").pop() ?? o.dest;
  const mtime = Math.floor(o.file.lastModified / 1000);
  const machine = await Machine.sending([{ path: name, kind: "file", size, mtime, mode: 0o644 }]);
  const inbox = new Inbox();
  const tag = wt.tag();
  const cancelled = () => inbox.post({ cancelled: true });
  o.signal.addEventListener("abort", cancelled, { once: true });
  /** @type {Awaited<ReturnType<import("./wt.js").Wt["open"]>> | null} */
  let control = null;
  // The running phase: its number, and the stop of its pieces.
  /** @type {{ n: number, stop: AbortController } | null} */
  let phase = null;
  let stored = true;
  let resumed = 0;
  try {
    if (o.signal.aborted) throw new api.ApiError(0, "cancelled", "cancelled");
    const rate = o.rateBps ? { rate_bps: o.rateBps } : {};
    const c = await openControl(wt, { op: "store", path: o.dest, policy: o.policy, tag, ...rate }, inbox);
    control = c;

    /**
     * Sends `ranges` as phase `n`'s pieces, at most `wt.streams` at once; the first phase's
     * bytes are the progress (a repair's are not: they were counted once).
     * @param {number} n
     * @param {[number, number][]} ranges
     * @param {AbortSignal} stop
     */
    const send = async (n, ranges, stop) => {
      const pieces = cut(ranges);
      const progress = n === 0 ? o.progress : () => {};
      let next = 0;
      const worker = async () => {
        while (next < pieces.length && !stop.aborted) {
          const [a, b] = pieces[next++];
          const bytes = new Uint8Array(await o.file.slice(a, b).arrayBuffer());
          await wt.push(tag, n, a, bytes, progress, stop);
        }
      };
      await Promise.all(Array.from({ length: Math.min(wt.streams, pieces.length) }, worker));
    };

    const state = { peerOpen: true, what: "the upload's control stream" };
    for (;;) {
      for (let e = machine.effect(); e; e = machine.effect()) {
        if ("frame" in e) {
          await c.writer.write(e.frame);
          continue;
        }
        const j = e.json;
        if (j.wanted) stored = j.wanted.files.length > 0;
        else if (j.check_resume) {
          // The leading blocks the server holds that this file has too.
          const kept = [];
          for (const [, theirs] of j.check_resume) {
            const mine = await blockHashes(o.file, theirs.length, o.signal);
            let same = 0;
            while (same < theirs.length && theirs[same] === mine[same]) same += 1;
            kept.push(Math.min(size, same * BLOCK));
          }
          resumed = kept[0] ?? 0;
          if (resumed) o.resumed(resumed);
          machine.event({ resume_checked: { kept } });
        } else if (j.bind) machine.event({ bound: { phase: j.bind.phase } });
        else if (j.start_data) {
          const s = j.start_data;
          const stop = new AbortController();
          phase = { n: s.phase, stop };
          send(s.phase, s.ranges, stop.signal).then(
            () => inbox.post({ sent: s.phase }),
            (e) => inbox.post(stop.signal.aborted ? { sent: s.phase } : { pushFailed: e }));
        } else if (j === "hash_files") {
          o.hashing.then((hex) => inbox.post({ hashed: hex }), (e) => inbox.post({ hashFailed: e }));
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
            if (k !== 0) throw new Error(`the machine asked for the blocks of file ${k} of 1`);
            hashed.push(await blockHashes(o.file, null, o.signal));
          }
          machine.event({ blocks_hashed: { hashed } });
        } else if (j.done?.ok) {
          await c.writer.close().catch(() => {});
          const last = await lastHead(inbox);
          control = null;
          return { stored, resumed, repaired: j.done.ok.repaired, name: stored ? last?.name ?? null : null };
        } else if (j.done?.error) throw failure(j.done.error);
        // "stop_hashing": the hash is the caller's, and goes on.
      }
      const item = await nextItem(machine, inbox, state);
      if (item === null) continue;
      if (item.pushFailed) {
        const why = String(item.pushFailed?.message ?? item.pushFailed);
        machine.event({ failure: { code: "network", message: `the upload's pieces failed: ${why}` } });
      } else if (item.hashFailed) {
        const why = String(item.hashFailed?.message ?? item.hashFailed);
        machine.event({ failure: { code: "io", message: `the file could not be read: ${why}` } });
      } else if (item.hashed) {
        machine.event({ hashed: { hashes: [item.hashed] } });
      } else if (item.sent !== undefined && phase?.n === item.sent) {
        phase = null;
        machine.event({ data_ended: { phase: item.sent } });
      }
    }
  } finally {
    o.signal.removeEventListener("abort", cancelled);
    phase?.stop.abort();
    control?.cancel();
    machine.end();
  }
}

/**
 * The server's last head on an upload's stream once the machines are done (`{stored, name}`,
 * conn.rs): the next frame; null when the stream ends or fails first, or none came in time.
 * @param {Inbox} inbox
 * @returns {Promise<{ stored: boolean, name?: string } | null>}
 */
async function lastHead(inbox) {
  const until = performance.now() + LAST_HEAD_MS;
  for (;;) {
    const item = await inbox.next(until - performance.now());
    if (item === null || item.finished || item.failed) return null;
    if (item.frame) {
      // The file is stored whatever this says: a head not understood names nothing.
      try {
        return json(item.frame.subarray(4));
      } catch {
        return null;
      }
    }
    // The pieces' ends, and a cancel: the upload is done.
  }
}
