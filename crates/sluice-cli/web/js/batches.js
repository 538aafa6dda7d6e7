// Several small files of one copy in one run of the transfer machines (over WebTransport): a
// folder of 200 small files costs the machines' round trips (manifest, plan, data, digests,
// verdict) a few times, not 200 times, as a CLI copy of a folder does. Each file keeps its row:
// its own progress and its own outcome (the server's plan may keep it by the overwrite policy).
// A cancel of one file ends its run; the run's other files are queued again (and go together
// again). A run that cannot go as a batch (HTTPS, a keep-both or a question to ask, a refusal,
// a broken session) sends its files back to the queue one by one, where each goes as it would
// alone: its question, its way, its fallback and its resume, as before.

import * as api from "./api.js";
import { size } from "./dom.js";
import { fetchFiles } from "./fetch.js";
import { hashBlob } from "./hash.js";
import { storeFiles } from "./store.js";
import { note } from "./transfers.js";
import { mode, session as wtSession } from "./wt.js";

/** Files larger than this go alone (their own run: its probe, its resume by blocks). */
export const BATCH_FILE_MAX = 4 << 20;
/** Files in one run at most. */
const BATCH_FILES_MAX = 256;
/** Bytes of one run's files at most. */
const BATCH_BYTES_MAX = 64 << 20;
/** Runs of a batch refused as busy before its files go one by one, and the wait between. */
const BUSY_TRIES = 40;
const BUSY_WAIT_MS = 250;

/**
 * How a file may go with others of its copy: those of the same `key` share runs.
 * @typedef {object} Batch
 * @property {string} key the copy (and direction) it belongs to
 * @property {string} root the server's folder: an upload's files go into it, a download's
 *   come from it
 * @property {string} path an upload's: the file's path beneath `root`; a download's: its path
 *   in the server's manifest of `root` (`root`'s own name first); `/`-separated
 * @property {File} [file] an upload's bytes
 * @property {{ local: import("./local.js").HandleDir, dest: string, mtime: number, whole: number }} [down]
 *   a download's: where it goes, the server's time of the file, and how many files the copy
 *   has (when a run has them all, their data starts right behind the manifest)
 * @property {number} [tries] its runs refused as busy so far
 */

/** @typedef {import("./transfers.js").Job} Job */
/** @typedef {import("./transfers.js").Transfers} Transfers */

/**
 * The queued jobs that go in one run with `first`: those of its copy, in order, within the
 * bounds.
 * @param {Job[]} jobs
 * @param {Job} first
 */
export function batchOf(jobs, first) {
  const group = [];
  let bytes = 0;
  for (const job of jobs) {
    if (job.state !== "queued" || job.batch?.key !== first.batch?.key) continue;
    if (group.length >= BATCH_FILES_MAX || bytes + job.size > BATCH_BYTES_MAX) break;
    group.push(job);
    bytes += job.size;
  }
  return group;
}

/**
 * Runs `jobs` (of one copy) as one run; when done, `t` starts what is queued.
 * @param {Transfers} t
 * @param {Job[]} jobs
 */
export async function runBatch(t, jobs) {
  t.runs += 1;
  const stop = new AbortController();
  for (const job of jobs) {
    job.state = "running";
    job.note = "";
    job.abort = new AbortController();
    job.abort.signal.addEventListener("abort", () => stop.abort(), { once: true });
    job.samples = [{ t: performance.now(), bytes: job.moved }];
  }
  t.render();
  let alone = false;
  try {
    const run = jobs[0].dir === "up" ? upload : download;
    alone = !(await run(t, jobs, stop.signal));
  } catch (e) {
    // A run of before (cancelled, cut off) may still be ending at the server, its files busy
    // for a moment: this run goes again as it is, after a wait (the single file's rule).
    const busy = e instanceof api.ApiError && e.code === "busy" && (jobs[0].batch?.tries ?? 0) < BUSY_TRIES;
    if (busy && !stop.signal.aborted) {
      for (const job of jobs) if (job.batch) job.batch.tries = (job.batch.tries ?? 0) + 1;
      await new Promise((r) => setTimeout(r, BUSY_WAIT_MS));
    } else if (!stop.signal.aborted) {
      console.warn("a batch of files failed: they go one by one", e);
      alone = true;
    }
  }
  for (const job of jobs) {
    if (job.state === "running") {
      // Not done: it moves again whole (a small file keeps nothing of a run cut off).
      t.progress(job, -job.done);
      job.state = job.abort?.signal.aborted ? "cancelled" : "queued";
      if (alone) job.batch = null;
    }
    job.abort = null;
  }
  t.runs -= 1;
  t.render();
  t.changed();
  t.pump();
}

/**
 * `jobs` uploaded in one run into their copy's folder, by the policy the user gave for all
 * (none: `refuse`, and the server refuses the run if a file is there, which then asks its
 * question alone). False when they cannot go as a batch.
 * @param {Transfers} t
 * @param {Job[]} jobs
 * @param {AbortSignal} signal
 */
async function upload(t, jobs, signal) {
  const policy = t.answered() || "refuse";
  if (policy === "keep-both") return false;
  const total = jobs.reduce((n, j) => n + j.size, 0);
  const wt = await wtSession();
  const plan = wt ? t.chooser.plan(mode(), "up", total, true) : null;
  if (!wt || plan?.via !== "wt" || plan.probe) return false;
  const batches = jobs.map((j) => /** @type {Batch} */ (j.batch));
  const files = batches.map((b) => ({ path: b.path, file: /** @type {File} */ (b.file) }));
  const done = await storeFiles(wt, {
    files, dirs: folders(files.map((f) => f.path)), to: { dir: batches[0].root }, policy,
    rateBps: t.rateLimit(), hashing: inTurn(files.map((f) => f.file), signal), signal,
    progress: (i, n) => t.progress(jobs[i], n),
    resumed: (i, kept) => {
      jobs[i].resumed = kept;
      jobs[i].done += kept;
    },
  });
  jobs.forEach((job, i) => {
    if (!done.stored[i]) {
      job.state = "skipped";
      return;
    }
    t.progress(job, Math.max(0, job.size - job.done));
    job.done = job.size;
    // Verified by the machines: the server placed each file once its digest agreed with this
    // page's.
    job.note = [job.resumed ? `resumed at ${size(job.resumed)}` : "", "BLAKE3 verified"].filter(Boolean).join("; ");
    job.state = "done";
  });
  return true;
}

/**
 * `jobs` downloaded in one run from their copy's folder, each by its overwrite question (asked
 * first, as alone). False when they cannot go as a batch.
 * @param {Transfers} t
 * @param {Job[]} jobs
 * @param {AbortSignal} signal
 */
async function download(t, jobs, signal) {
  const total = jobs.reduce((n, j) => n + j.size, 0);
  const wt = await wtSession();
  const plan = wt ? t.chooser.plan(mode(), "down", total, true) : null;
  if (!wt || plan?.via !== "wt" || plan.probe) return false;
  /** @type {import("./fetch.js").Wanted[]} */
  const files = [];
  /** @type {Job[]} */
  const taking = [];
  /** @param {Job} job its place here, after its question if a file is there */
  const prepare = async (job) => {
    const b = /** @type {Batch} */ (job.batch);
    const down = /** @type {NonNullable<Batch["down"]>} */ (b.down);
    try {
      const target = await t.target(down.local, down.dest, down.mtime);
      if (!target) {
        job.state = "skipped";
        return;
      }
      if (target.finalName !== target.name) job.note = `stored as ${target.finalName}`;
      files.push({ path: b.path, part: target.part, place: target.place });
      taking.push(job);
    } catch (e) {
      job.state = "failed";
      job.note = String(/** @type {Error} */ (e)?.message ?? e);
    }
  };
  // Those with no file there side by side (each is a few rounds of the browser's storage);
  // those with one in turn, each question after the other.
  const there = await Promise.all(jobs.map((job) => {
    const down = /** @type {NonNullable<Batch["down"]>} */ (job.batch?.down);
    return down.local.existing(down.dest).then(Boolean, () => true);
  }));
  await Promise.all(jobs.filter((_, i) => !there[i]).map(prepare));
  for (const job of jobs.filter((_, i) => there[i])) await prepare(job);
  if (!taking.length) return true;
  const b = /** @type {Batch} */ (taking[0].batch);
  const { found } = await fetchFiles(wt, {
    src: b.root, files, every: taking.length === b.down?.whole, rateBps: t.rateLimit(), signal,
    progress: (i, n) => t.progress(taking[i], n),
    resumed: (i, kept) => note(taking[i], `resumed at ${size(kept)}`),
    sized: (i, bytes) => { taking[i].size = bytes; },
  });
  const memory = wt.memoryNote();
  if (memory) note(taking[0], memory);
  taking.forEach((job, i) => {
    if (!found[i]) {
      job.state = "failed";
      job.note = "the server no longer has it";
      return;
    }
    t.progress(job, Math.max(0, job.size - job.done));
    job.done = job.size;
    job.note = [job.note, "BLAKE3 verified"].filter(Boolean).join("; ");
    job.state = "done";
  });
  return true;
}

/**
 * Each file's BLAKE3, hashed one after another (the module holds a few hashers at once).
 * @param {File[]} files
 * @param {AbortSignal} signal
 * @returns {Promise<string>[]}
 */
function inTurn(files, signal) {
  /** @type {Promise<unknown>} */
  let last = Promise.resolve();
  return files.map((file) => {
    const hashed = last.then(() => hashBlob(file, undefined, signal));
    hashed.catch(() => {}); // awaited by the run; a cancel ends it
    last = hashed;
    return hashed;
  });
}

/**
 * Every folder on the way to each of `paths`, each once, each before those in it.
 * @param {string[]} paths
 */
export function folders(paths) {
  const all = new Set();
  for (const p of paths) {
    for (let at = p.indexOf("/"); at >= 0; at = p.indexOf("/", at + 1)) all.add(p.slice(0, at));
  }
  // A folder's path is a prefix of those in it, so it sorts before them.
  return [...all].sort();
}
