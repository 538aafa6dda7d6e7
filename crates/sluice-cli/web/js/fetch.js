// A download run by the transfer machines, as a CLI download is (docs/webtransport.md, "The page
// and sluice-session's machines"): the server runs `Sending` on a `fetch` request's stream, this
// page runs `Receiving` in its module (machines.js), and their messages are the CLI's: the
// manifest, the page's plan with its resume offer (the BLAKE3 of each whole block the partial
// file holds), the digests, the repair rounds. The page does what its machine asks: the bytes
// come as pieces on the server's streams (wt.js, `route`), each written at its place in the
// partial file and hashed as its block of the file's BLAKE3 tree (hash.js, `Tree`), so the
// file's hash is there when the last piece is, without reading the file again; the machine
// compares it with the server's and the page moves the file into place only when they agree.

import * as api from "./api.js";
import { Tree, blockHashes, hashBlob, hashBytes as blake3 } from "./hash.js";
import { Inbox, Machine, failure, nextItem, openControl } from "./machines.js";

/**
 * @typedef {object} FetchOptions
 * @property {string} src the server's path of the file
 * @property {FileSystemFileHandle} part the partial file: what it holds is offered for a resume
 * @property {number} have the bytes the caller counted as done (the partial file's size)
 * @property {number} rateBps a cap on the rate, 0 for none
 * @property {AbortSignal} signal
 * @property {(n: number) => void} progress bytes received (negative: counted before and not kept)
 * @property {(kept: number) => void} resumed what the server agreed the partial file holds, when
 *   it holds anything
 * @property {(size: number) => void} sized the file's size as the server's manifest says (the
 *   listing the caller had may be older)
 * @property {() => Promise<void>} place moves the verified partial file into place
 */

/**
 * Downloads `o.src` into `o.part` and, verified, moves it into place (`o.place`).
 * @param {import("./wt.js").Wt} wt
 * @param {FetchOptions} o
 * @returns {Promise<{ resumed: number, repaired: number, fromBlocks: boolean }>} `fromBlocks`:
 *   the file's hash came from its blocks' as they arrived
 */
export async function fetchFile(wt, o) {
  // Nothing kept: the server starts the bytes right behind the manifest (a round trip saved).
  const fresh = (await o.part.getFile()).size === 0;
  const machine = await Machine.receiving(fresh);
  const inbox = new Inbox();
  const tag = wt.route({
    piece: (phase, offset, bytes) => inbox.post({ piece: { phase, offset, bytes } }),
    progress: o.progress,
  });
  const cancelled = () => inbox.post({ cancelled: true });
  o.signal.addEventListener("abort", cancelled, { once: true });
  /** @type {Awaited<ReturnType<import("./wt.js").Wt["open"]>> | null} */
  let control = null;
  /** @type {Tree | null} */
  let tree = null;
  /** @type {FileSystemWritableFileStream | null} */
  let out = null;
  let size = 0;
  // The ranges of the file the partial file holds, merged, in order.
  /** @type {[number, number][]} */
  let held = [];
  /** @param {number} a @param {number} b */
  const hold = (a, b) => {
    held.push([a, b]);
    held.sort((x, y) => x[0] - y[0]);
    /** @type {[number, number][]} */
    const merged = [];
    for (const [x, y] of held) {
      const last = merged[merged.length - 1];
      if (last && x <= last[1]) last[1] = Math.max(last[1], y);
      else merged.push([x, y]);
    }
    held = merged;
  };
  /** The bytes from the start without a gap: what a cut-off download keeps. */
  const prefix = () => (held[0]?.[0] === 0 ? held[0][1] : 0);
  // The running data phase, and pieces of phases not yet started (they race the message that
  // starts them).
  /** @type {{ phase: { n: number, left: number, ends: number[] } | null }} */
  const run = { phase: null };
  /** @type {{ phase: number, offset: number, bytes: Uint8Array }[]} */
  let early = [];
  let fromBlocks = true;
  let placed = false;
  try {
    if (o.signal.aborted) throw new api.ApiError(0, "cancelled", "cancelled");
    const head = { op: "fetch", paths: [o.src], tag, early: fresh, ...(o.rateBps ? { rate_bps: o.rateBps } : {}) };
    const c = await openControl(wt, head, inbox);
    control = c;

    /** @param {{ phase: number, offset: number, bytes: Uint8Array }} p */
    const write = async (p) => {
      if (!out || !run.phase) throw new Error("a piece with no phase running");
      await out.write({ type: "write", position: p.offset, data: /** @type {any} */ (p.bytes) });
      try {
        tree?.add(p.offset, p.bytes);
      } catch {
        // Not a whole block of the file: the tree then lacks it, and the file's hash comes
        // from reading the file at the end (`received`).
      }
      hold(p.offset, p.offset + p.bytes.length);
      run.phase.left -= p.bytes.length;
    };

    /** @param {any[]} entries the manifest */
    const plan = async (entries) => {
      const files = entries.filter((e) => e.kind === "file");
      if (files.length !== 1) {
        const message = `${o.src}: a download here is one file, and the server lists ${files.length}`;
        machine.event({ failure: { code: "refused", message } });
        return;
      }
      size = files[0].size;
      o.sized(size);
      tree = await Tree.create(size, "machines");
      // The partial file's whole blocks (all of it when it is the whole file) are offered; the
      // server keeps those that match its own, from the first.
      const kept = await o.part.getFile();
      const offered = tree.resumeAt(Math.min(kept.size, size), kept);
      const hashes = [];
      for (let at = 0; at < offered; at += tree.block) {
        if (o.signal.aborted) throw new api.ApiError(0, "cancelled", "cancelled");
        const bytes = new Uint8Array(await kept.slice(at, Math.min(at + tree.block, size)).arrayBuffer());
        tree.add(at, bytes);
        hashes.push(await blake3(bytes));
      }
      machine.event({ planned: { files: [0], offers: hashes.length ? [[0, hashes]] : [] } });
    };

    /** @param {any} s */
    const start = async (s) => {
      const [a, b] = s.span;
      /** @type {[number, number][]} */
      const present = s.present;
      run.phase = { n: s.phase, left: b - a - present.reduce((n, [x, y]) => n + y - x, 0), ends: s.ends };
      out ??= await o.part.createWritable({ keepExistingData: true });
      if (s.phase === 0) {
        // What the server agreed the partial file holds: the rest of it goes.
        held = [];
        for (const [x, y] of present) hold(x, y);
        const kept = prefix();
        await out.truncate(kept);
        o.progress(kept - o.have);
        if (kept) o.resumed(kept);
      }
      const now = early.filter((p) => p.phase === s.phase);
      early = early.filter((p) => p.phase > s.phase);
      for (const p of now) await write(p);
    };

    /** Every byte of the phase is in: the file's hash, from its blocks' or read back. */
    const received = async () => {
      const p = run.phase;
      if (!p) return;
      let hex = tree?.hex() ?? null;
      if (!hex) {
        fromBlocks = false;
        await out?.close();
        out = null;
        hex = await hashBlob(await o.part.getFile(), undefined, o.signal);
      }
      machine.event({ received: { phase: p.n, hashes: p.ends.map(() => hex) } });
      machine.event({ data_ended: { phase: p.n } });
      run.phase = null;
    };

    /** @param {number[]} which the files (here: the one) whose blocks the repair compares */
    const hashBlocks = async (which) => {
      await out?.close();
      out = null;
      const file = (await o.part.getFile()).slice(0, size);
      const hashed = [];
      for (const k of which) {
        if (k !== 0) throw new Error(`the machine asked for the blocks of file ${k} of 1`);
        hashed.push(await blockHashes(file, null, o.signal));
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
        await out?.close();
        out = null;
        await o.place();
        placed = true;
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
        else if (j.start_data) await start(j.start_data);
        else if (j.hash_blocks) await hashBlocks(j.hash_blocks);
        else if (j.commit) await commit(j.commit);
        else if (j.done?.ok) {
          await c.writer.close().catch(() => {});
          control = null;
          return { resumed: j.done.ok.resumed, repaired: j.done.ok.repaired, fromBlocks };
        }
        else if (j.done?.error) throw failure(j.done.error);
        // "stop_data" and "drop_early": nothing runs here that they would stop.
      }
      if (run.phase?.left === 0) {
        await received();
        continue;
      }
      const item = await nextItem(machine, inbox, state);
      if (item?.piece) {
        if (run.phase && item.piece.phase === run.phase.n) await write(item.piece);
        else early.push(item.piece);
      }
    }
  } finally {
    o.signal.removeEventListener("abort", cancelled);
    wt.unroute(tag);
    control?.cancel();
    if (out && !placed) {
      // Cut off: the partial file keeps the bytes from its start up to the first gap.
      const w = /** @type {FileSystemWritableFileStream} */ (out);
      await w.truncate(prefix()).catch(() => {});
      await w.close().catch(() => {});
    }
    machine.end();
    /** @type {Tree | null} */ (tree)?.drop();
  }
}
