// The transfer panel: a queue of file copies (uploads to the server, downloads to a folder of
// this computer), a few at a time, each with progress, rate, ETA, cancel and retry. An upload
// resumes from what the server holds (it says how much) and sends the rest in one request; a
// download from what the partial file beside its destination holds (a Range request with
// If-Range, so a file changed on the server since comes whole). The rate limit is the
// server's to hold (it paces each transfer to it, or to the token's lower one). Folders are
// walked by the caller and their files queued at once, each with its own row; over WebTransport
// the small files of one copy go several to a machine run (batches.js).

import * as api from "./api.js";
import { RateChart } from "./chart.js";
import { Chooser, PROBE_MIN_BYTES, PROBE_MS } from "./choose.js";
import { byId, duration, el, setText, size, ask } from "./dom.js";
import { BATCH_FILE_MAX, batchOf, runBatch } from "./batches.js";
import { fetchFiles } from "./fetch.js";
import { storeFile } from "./store.js";
import { Tree, hashBlob } from "./hash.js";
import { join, split } from "./local.js";
import { failed as wtFailed, mode, session as wtSession } from "./wt.js";

/** Transfers (machine runs, or HTTPS requests) at once. */
const RUNNING_MAX = 3;
/** Transfers at once while the next to start is a small file going alone (an HTTPS upload of
 * one request, whose time is its round trips, not its bytes): a folder of small files over
 * HTTPS keeps more of them in flight. */
const SMALL_RUNNING_MAX = 8;
/** An HTTPS upload of at most this many bytes waits for its file's BLAKE3 (milliseconds in
 * WebAssembly) and sends it with the bytes: the server stores the file at the end of that one
 * request, where a hash sent `later` costs a second request and its round trip. */
const HASH_FIRST_MAX = 4 << 20;
/** Transfers that end this close together refresh the panes once: each refresh lists both
 * panes' folders, and a folder of 200 small files over HTTPS (each its own transfer) listed
 * them 200 times, the page's work growing with the square of the files. */
const CHANGED_EVERY_MS = 500;

/** @typedef {import("./local.js").Local} Local */
/**
 * A download's tree of block hashes for a version of the file: the one it has if of the same
 * size and version, else a new one.
 * @typedef {(size: number, version: string) => Promise<Tree>} TreeOf
 */
/** @typedef {"always" | "never" | "keep-both" | "if-newer"} Policy */

/** The overwrite question's answers: the CLI's policies (`sluice cp --overwrite`) and keep both. */
const POLICIES = [
  { value: "always", label: "Replace" },
  { value: "never", label: "Skip" },
  { value: "keep-both", label: "Keep both" },
  { value: "if-newer", label: "If newer" },
];

/**
 * @typedef {object} Job
 * @property {number} id
 * @property {string} name shown
 * @property {"up" | "down"} dir
 * @property {number} size
 * @property {number} done bytes at either end
 * @property {number} moved bytes moved by this page (not those kept from before)
 * @property {number} resumed bytes of an earlier try the receiving end kept (an upload's)
 * @property {string} state queued, running, done, skipped, cancelled, failed
 * @property {string} note
 * @property {AbortController | null} abort
 * @property {(() => void) | null} onCancel what a cancel tells the server, if anything
 * @property {() => Promise<void>} run
 * @property {{ t: number, bytes: number }[]} samples
 * @property {HTMLTableRowElement | null} row
 * @property {import("./batches.js").Batch | null} batch how it may go with others of its copy
 *   in one run (null: alone)
 */

/**
 * Adds `text` to what the panel says of `job`.
 * @param {Job} job
 * @param {string} text
 */
export function note(job, text) {
  // A retry that resumes at the same place says nothing new.
  if (job.note === text || job.note.endsWith(`; ${text}`)) return;
  job.note = [job.note, text].filter(Boolean).join("; ");
}

export class Transfers {
  /** @param {() => void} onChange called when a transfer ends (panes refresh) */
  constructor(onChange) {
    /** @type {Job[]} */
    this.jobs = [];
    this.nextId = 1;
    this.onChange = onChange;
    /** @type {Policy | null} the answer for all, when the user gave one */
    this.policyForAll = null;
    /** Runs under way (a batch of files is one). */
    this.runs = 0;
    /** While true, `pump` waits: the files of a copy are being queued. */
    this.holding = false;
    /** @type {ReturnType<typeof setTimeout> | null} while set, panes were refreshed lately */
    this.changeTimer = null;
    /** Whether a transfer ended since the panes' last refresh ([`changed`]). */
    this.changePending = false;
    byId("clear-done").addEventListener("click", () => {
      this.jobs = this.jobs.filter((j) => !["done", "skipped"].includes(j.state));
      this.render();
    });
    /** Bytes moved by every transfer of this page. */
    this.movedAll = 0;
    /** Which way each direction goes in "auto" (choose.js), its figures kept across reloads. */
    this.chooser = new Chooser(() => Date.now(), pageStore());
    this.chart = new RateChart(byId("chart"), byId("rate-peak"));
    // The chart's rate: bytes moved between two ticks (short transfers count too).
    let last = { t: performance.now(), moved: 0 };
    setInterval(() => {
      this.render();
      const now = { t: performance.now(), moved: this.movedAll };
      this.chart.add(now.t, ((now.moved - last.moved) * 1000) / Math.max(1, now.t - last.t));
      last = now;
    }, 500);
  }

  /**
   * One run of a transfer by `via`: `run` under the job's signal. When `probe`, the rate of
   * the second half of its first PROBE_MS (`held()`: what the receiving end holds) is this
   * way's figure, and the run stops unless the choice made with that figure is to go on the
   * same way (it is the faster: stopping would only cost it its climb). A run that ends the
   * transfer after moving at least PROBE_MIN_BYTES gives its whole rate as the figure; a run
   * that fails gives none.
   * @template T
   * @param {Job} job
   * @param {import("./choose.js").Via} via
   * @param {boolean} probe
   * @param {() => Promise<number>} held
   * @param {(signal: AbortSignal) => Promise<T>} run
   * @returns {Promise<{ result: T | null, probed: boolean }>} probed: the probe's time ran out
   */
  async slice(job, via, probe, held, run) {
    const signal = /** @type {AbortController} */ (job.abort).signal;
    const slice = new AbortController();
    const stop = () => slice.abort();
    signal.addEventListener("abort", stop, { once: true });
    let ran = false;
    const before = await held();
    const started = performance.now();
    // The probe's figure is its second half: the first holds the climb, and what the last
    // run (the other way, just stopped) still had in flight on the path.
    let mid = { bytes: before, t: started };
    const halfway = probe ? setTimeout(() => {
      held().then((bytes) => { mid = { bytes, t: performance.now() }; }, () => {});
    }, PROBE_MS / 2) : null;
    const decide = async () => {
      const now = await held().catch(() => mid.bytes);
      this.chooser.record(job.dir, via, Math.max(0, now - mid.bytes), performance.now() - mid.t);
      this.probed(job, via);
      const next = this.chooser.plan(mode(), job.dir, job.size - now, true);
      if (next.via === via && !next.probe) return;
      ran = true;
      slice.abort();
    };
    const timer = probe ? setTimeout(() => { decide(); }, PROBE_MS) : null;
    try {
      const result = await run(slice.signal);
      // A run that ended the transfer moved all that was left; one long enough to say more
      // than its climb is this way's figure from now on.
      const moved = job.size - before;
      if (mode() === "auto" && moved >= PROBE_MIN_BYTES) {
        this.chooser.record(job.dir, via, moved, performance.now() - started);
      }
      return { result, probed: false };
    } catch (e) {
      if (ran && !signal.aborted) return { result: null, probed: true };
      throw e;
    } finally {
      if (timer) clearTimeout(timer);
      if (halfway) clearTimeout(halfway);
      signal.removeEventListener("abort", stop);
    }
  }

  /**
   * Notes on `job` what its probe of `via` measured.
   * @param {Job} job
   * @param {import("./choose.js").Via} via
   */
  probed(job, via) {
    const rate = this.chooser.rate(job.dir, via);
    const name = via === "wt" ? "WebTransport" : "HTTPS";
    const said = `${name} measured${rate === null ? "" : ` ${size(rate)}/s`}`;
    note(job, said);
  }

  /** Says in the panel which way each direction goes and why. */
  renderChoice() {
    const where = byId("choice");
    if (mode() !== "auto") {
      where.textContent = "";
      return;
    }
    const parts = [];
    for (const dir of /** @type {const} */ (["up", "down"])) {
      const wt = this.chooser.rate(dir, "wt");
      const https = this.chooser.rate(dir, "https");
      where.dataset[`${dir}Wt`] = wt === null ? "" : String(Math.round(wt));
      where.dataset[`${dir}Https`] = https === null ? "" : String(Math.round(https));
      const plan = this.chooser.plan("auto", dir, 0, true);
      where.dataset[`${dir}Pick`] = plan.via;
      const figures = [wt === null ? "" : `WebTransport ${size(wt)}/s`, https === null ? "" : `HTTPS ${size(https)}/s`]
        .filter(Boolean).join(", ");
      const label = dir === "up" ? "uploads" : "downloads";
      parts.push(`${label}: ${plan.via === "wt" ? "WebTransport" : "HTTPS"}${figures ? ` (${figures})` : " (not measured yet)"}`);
    }
    where.textContent = parts.join(" · ");
  }

  /** Bits per second each transfer may move (the server paces it); 0: no limit but the token's. */
  rateLimit() {
    const mb = Number(/** @type {HTMLInputElement} */ (byId("rate")).value);
    return Number.isFinite(mb) && mb > 0 ? Math.round(mb * 8e6) : 0;
  }

  /**
   * @param {string} name
   * @param {"up" | "down"} dir
   * @param {number} size
   * @param {(job: Job) => Promise<void>} work
   * @param {import("./batches.js").Batch | null} [batch]
   */
  add(name, dir, size, work, batch = null) {
    /** @type {Job} */
    const job = {
      id: this.nextId++, name, dir, size, done: 0, moved: 0, resumed: 0, state: "queued", note: "",
      abort: null, onCancel: null, samples: [], row: null, run: async () => {},
      batch: batch && size <= BATCH_FILE_MAX ? batch : null,
    };
    job.run = async () => {
      this.runs += 1;
      job.state = "running";
      job.note = "";
      job.abort = new AbortController();
      // From the start: the first progress already gives a rate.
      job.samples = [{ t: performance.now(), bytes: job.moved }];
      try {
        await work(job);
        if (job.state === "running") job.state = "done";
      } catch (e) {
        const err = /** @type {any} */ (e);
        if (job.abort?.signal.aborted) job.state = "cancelled";
        else {
          job.state = "failed";
          job.note = err?.message ?? String(err);
        }
      }
      job.abort = null;
      this.runs -= 1;
      this.render();
      this.changed();
      this.pump();
    };
    this.jobs.push(job);
    this.pump();
    return job;
  }

  /**
   * Tells the panes that a transfer ended: at once, or, when one did less than
   * [`CHANGED_EVERY_MS`] ago, once that time is up (every transfer that ended meanwhile
   * together).
   */
  changed() {
    if (this.changeTimer) {
      this.changePending = true;
      return;
    }
    this.onChange();
    this.changeTimer = setTimeout(() => {
      this.changeTimer = null;
      if (this.changePending) {
        this.changePending = false;
        this.changed();
      }
    }, CHANGED_EVERY_MS);
  }

  /**
   * Queues what `queue` adds, then starts: a copy's files are all queued before the first
   * run, so its small files share runs.
   * @param {() => void} queue
   */
  together(queue) {
    this.holding = true;
    try {
      queue();
    } finally {
      this.holding = false;
      this.pump();
    }
  }

  /** Starts queued jobs while there are places: a job that may go with others of its copy
   * starts with them in one run. */
  pump() {
    if (this.holding) return;
    const room = (/** @type {Job} */ job) =>
      this.runs < (!job.batch && job.size <= HASH_FIRST_MAX ? SMALL_RUNNING_MAX : RUNNING_MAX);
    for (let job = this.jobs.find((j) => j.state === "queued"); job && room(job);
      job = this.jobs.find((j) => j.state === "queued")) {
      const group = job.batch ? batchOf(this.jobs, job) : [job];
      if (group.length > 1) runBatch(this, group);
      else job.run();
    }
    this.render();
  }

  /** The overwrite policy the user gave for every file (in the panel, or "for all"), if any. */
  answered() {
    const standing = /** @type {HTMLSelectElement} */ (byId("policy")).value;
    return /** @type {Policy | ""} */ (standing) || this.policyForAll;
  }

  /**
   * The overwrite question for `name` (what is there: `existing`), unless answered for all.
   * @param {string} name
   * @param {string} existing
   * @returns {Promise<Policy | null>} null: cancelled
   */
  async question(name, existing) {
    const given = this.answered();
    if (given) return given;
    const answer = await ask(
      `"${name}" exists (${existing}). What should happen?`,
      [...POLICIES, ...POLICIES.map((p) => ({ value: `all:${p.value}`, label: `${p.label} all` }))],
    );
    if (!answer) return null;
    if (answer.choice.startsWith("all:")) {
      this.policyForAll = /** @type {Policy} */ (answer.choice.slice(4));
      return this.policyForAll;
    }
    return /** @type {Policy} */ (answer.choice);
  }

  /**
   * Records progress.
   * @param {Job} job
   * @param {number} delta bytes just moved
   */
  progress(job, delta) {
    job.done += delta;
    job.moved += delta;
    this.movedAll += delta;
    const now = performance.now();
    job.samples.push({ t: now, bytes: job.moved });
    while (job.samples.length > 2 && now - job.samples[0].t > 3000) job.samples.shift();
  }

  /**
   * Uploads `file` to the server path `dest`; `batch`: it may go with others of its copy.
   * @param {File} file
   * @param {string} dest
   * @param {import("./batches.js").Batch | null} [batch]
   */
  upload(file, dest, batch = null) {
    return this.add(dest, "up", file.size, async (job) => {
      const mtime = Math.floor(file.lastModified / 1000);
      const which = { path: dest, size: file.size, mtime };
      job.onCancel = () => { api.stopUpload(which).catch(() => {}); };
      let wt = await wtSession();
      // A small file over HTTPS goes in one request without asking first: the server stores
      // it, or answers that a file is there ("exists", keeping what came for the retry), and
      // only then is the question asked. A round trip less per file; a standing "skip" asks
      // first, so that nothing moves for a file it keeps.
      const unasked = file.size <= HASH_FIRST_MAX && this.answered() !== "never"
        && this.chooser.plan(mode(), "up", file.size, Boolean(wt)).via === "https";
      /** @type {api.UploadStatus} */
      let status = unasked ? { have: 0, exists: null } : await api.uploadStatus(dest, file.size, mtime);
      /** @type {string} */
      let policy = unasked ? this.answered() || "refuse" : "refuse";
      /** The overwrite question about the server's file `there`: its answer. */
      const asked = async (/** @type {{ size: number } | null} */ there) => {
        const answer = await this.question(dest, `${size(there?.size ?? 0)} on the server`);
        if (!answer) throw new Error("not answered");
        return answer;
      };
      if (status.exists) {
        policy = await asked(status.exists);
        if (policy === "never") {
          job.state = "skipped";
          return;
        }
      }
      const signal = /** @type {AbortController} */ (job.abort).signal;
      // The whole file's BLAKE3 (Sluice's own, in WebAssembly), hashed while the bytes go: the
      // server stores the file only once this hash came and what it holds hashes the same.
      const hashing = hashBlob(file, undefined, signal);
      hashing.catch(() => {}); // awaited at the end; a cancel ends it
      // What the server holds of the upload for HTTPS (its partial file, or what a WebTransport
      // try left, taken over when it holds more).
      const held = async () => (await api.uploadStatus(dest, file.size, mtime)).have;
      let afterProbe = false;
      // What this page sent before the question (sent unasked): the retry starts there, and
      // that is not a resume.
      let own = 0;
      // A request of before (cancelled, cut off, or a probe that ran out) may still be ending
      // at the server: it answers busy until then, and the offset it left is asked again.
      for (let attempt = 1; ; attempt += 1) {
        /** @param {number} have */
        const resumed = (have) => {
          job.done = have;
          job.resumed = have > own ? have : 0;
          if (have > own) note(job, `resumed at ${size(have)}`);
        };
        const plan = this.chooser.plan(mode(), "up", file.size - status.have, Boolean(wt));
        const on = plan.via === "wt" ? wt : null;
        try {
          // The machines' count is the page's: what it sent beyond what the server kept.
          const sent = async () => job.done;
          const { result, probed } = await this.slice(job, on ? "wt" : "https", plan.probe, on ? sent : held, (s) => on
            ? this.storeMachines(on, job, dest, policy, file, hashing, s, resumed)
            : this.uploadHttps(job, which, status.have, policy, file, hashing, s, resumed));
          if (!result || probed) {
            // The probe ran out: the server's request is stopped, and once what it held is
            // written (the server refuses a second writer meanwhile) the rest goes the other way.
            await api.stopUpload(which).catch(() => {});
            for (let same = 0, last = -1; same < 2; ) {
              await new Promise((r) => setTimeout(r, 200));
              status = await api.uploadStatus(dest, file.size, mtime);
              same = status.have === last ? same + 1 : 0;
              last = status.have;
            }
            afterProbe = true;
            continue;
          }
          if (result.done) job.note = [job.note, "BLAKE3 verified"].filter(Boolean).join("; ");
          this.progress(job, Math.max(0, result.have - job.done));
          job.done = result.have;
          if (!result.done) throw new Error(`cut off at ${size(result.have)}: Retry resumes`);
          if (!result.stored) job.state = "skipped";
          // The server's name for it (another under keep-both), as text.
          else if (result.name && result.name !== split(dest)[1]) note(job, `stored as ${result.name}`);
          return;
        } catch (e) {
          let code = e instanceof api.ApiError ? e.code : "";
          if (code === "exists" && policy === "refuse" && !signal.aborted) {
            // Sent unasked, and a file is there: the question now, then the same file again
            // by the answer (from what the server holds: all of it, so only the hash goes).
            status = await api.uploadStatus(dest, file.size, mtime);
            policy = await asked(status.exists);
            own = status.have;
            continue;
          }
          // Right after a probe the server may still end the stopped request and cut the next
          // one off before it answers: that is a wait, as busy is.
          if (afterProbe && code === "network") code = "busy";
          if (on && !signal.aborted && !code) {
            // The session broke (not a refusal of the server's): on over HTTPS.
            wtFailed(e);
            wt = null;
          } else if (signal.aborted || !["busy", "offset"].includes(code) || attempt >= 40) throw e;
          else await new Promise((r) => setTimeout(r, 250));
          status = await api.uploadStatus(dest, file.size, mtime);
        }
      }
    }, batch);
  }

  /**
   * An upload over WebTransport, run by the transfer machines (store.js): the server offers the
   * blocks a partial file of an earlier try holds and keeps those this file has too, the rest
   * goes as pieces over the page's lanes, and the server stores the file by `policy` once its
   * BLAKE3 of what it wrote agrees with this page's. Answers as `uploadHttps` does.
   * @param {import("./wt.js").Wt} wt
   * @param {Job} job
   * @param {string} dest
   * @param {string} policy
   * @param {File} file
   * @param {Promise<string>} hashing the whole file's BLAKE3, as it comes
   * @param {AbortSignal} signal
   * @param {(have: number) => void} resumed
   */
  async storeMachines(wt, job, dest, policy, file, hashing, signal, resumed) {
    // Counted from what the server agrees it holds (its partial file's blocks that match).
    resumed(0);
    const done = await storeFile(wt, {
      file, dest, policy, hashing, signal, resumed,
      rateBps: this.rateLimit(),
      progress: (n) => this.progress(job, n),
    });
    if (done.repaired) note(job, `${done.repaired} blocks sent again`);
    // Verified by the machines: the server placed the file once its digest agreed with this
    // page's.
    return { done: true, stored: done.stored, have: file.size, name: done.name };
  }

  /**
   * The rest of an upload over HTTPS, from `offset` (what the server holds), in one request;
   * once all of it is there, the whole file's hash in a request of no bytes.
   * @param {Job} job
   * @param {{ path: string, size: number, mtime: number }} which
   * @param {number} offset
   * @param {string} policy
   * @param {File} file
   * @param {Promise<string>} hashing the whole file's BLAKE3, as it comes
   * @param {AbortSignal} signal
   * @param {(have: number) => void} resumed
   */
  async uploadHttps(job, which, offset, policy, file, hashing, signal, resumed) {
    resumed(offset);
    const spec = { ...which, offset, policy, rate_bps: this.rateLimit() };
    const blake3 = file.size <= HASH_FIRST_MAX ? await hashing : "later";
    // Progress is what the server holds, asked twice a second: the browser's own count is
    // of what went into the connection, megabytes ahead of the server when it paces.
    const polling = setInterval(() => {
      api.uploadStatus(which.path, which.size, which.mtime).then((now) => {
        if (job.state === "running" && now.have > job.done) this.progress(job, now.have - job.done);
      }, () => {});
    }, 500);
    // The rest in one request: a cancel or a cut keeps what arrived; a retry asks again.
    const sent = await api.uploadPart(spec, file.slice(offset), blake3, () => {}, signal)
      .finally(() => clearInterval(polling));
    const end = { ...spec, offset: which.size };
    const done = sent.done || sent.have < which.size ? sent
      : await api.uploadPart(end, new Blob([]), await hashing, () => {}, signal);
    if (done.done && done.stored) {
      // The server's answer names the hash of what it stored.
      const blake3 = await hashing;
      if (done.blake3 !== blake3) {
        throw new Error(`BLAKE3 mismatch: the server stored ${done.blake3}, this page hashed ${blake3}`);
      }
    }
    return done;
  }

  /**
   * Where a download of a file of time `mtime` goes in `local` at `dest`, by the overwrite
   * question when a file is there: null when it is skipped.
   * @param {import("./local.js").HandleDir} local
   * @param {string} dest
   * @param {number} mtime
   */
  async target(local, dest, mtime) {
    const [dirPath, name] = split(dest);
    const dir = await local.dir(dirPath, true);
    let finalName = name;
    const existing = await local.existing(dest);
    if (existing) {
      const answer = await this.question(dest, `${size(existing.size)} on this computer`);
      if (!answer) throw new Error("not answered");
      const newer = mtime > Math.floor(existing.lastModified / 1000);
      if (answer === "never" || (answer === "if-newer" && !newer)) return null;
      if (answer === "keep-both") finalName = await freeName(dir, name);
    }
    const partName = `.${finalName}.sluice-download`;
    const part = await dir.getFileHandle(partName, { create: true });
    /** Moves the verified partial file into place (over the file there, unless kept beside it). */
    const place = async () => {
      if (existing && finalName === name) await dir.removeEntry(name);
      const move = /** @type {any} */ (part).move;
      if (!move) throw new Error("this browser cannot rename the finished file");
      await move.call(part, finalName);
    };
    return { dir, name, finalName, partName, part, place };
  }

  /**
   * Downloads the server file `src` into the folder `local` at `dest`; `batch`: it may go with
   * others of its copy.
   * @param {string} src
   * @param {number} fileSize
   * @param {import("./local.js").HandleDir} local
   * @param {string} dest
   * @param {number} mtime
   * @param {import("./batches.js").Batch | null} [batch]
   */
  download(src, fileSize, local, dest, mtime, batch = null) {
    return this.add(src, "down", fileSize, async (job) => {
      const target = await this.target(local, dest, mtime);
      if (!target) {
        job.state = "skipped";
        return;
      }
      const { dir, name, finalName, partName, part } = target;
      let have = (await part.getFile()).size;
      // The version of the file the partial bytes are of: without it they cannot be trusted.
      const tagKey = `sluice-etag:${src}\n${dest}`;
      const tag = localStorage.getItem(tagKey);
      if (have > fileSize || !tag) have = 0;
      const signal = /** @type {AbortController} */ (job.abort).signal;
      let wt = have === fileSize && fileSize > 0 ? null : await wtSession();
      const held = async () => (await part.getFile()).size;
      /** @type {Tree | null} the blocks' hashes, of one version of the file */
      let tree = null;
      /** @type {TreeOf} */
      const treeOf = async (bytes, version) => {
        if (tree && tree.size === bytes && tree.version === version) return tree;
        tree?.drop();
        tree = null;
        tree = await Tree.create(bytes, version);
        return tree;
      };
      // Moves the verified partial file into place (the machines' download does it once its
      // machine agreed the file's BLAKE3 with the server's, before it tells the server).
      let placed = false;
      /** @type {{ blake3: string | null, etag: string | null } | null} what the last HTTPS response said */
      let said = null;
      const place = async () => {
        await target.place();
        localStorage.removeItem(tagKey);
        placed = true;
      };
      try {
        for (;;) {
          const plan = this.chooser.plan(mode(), "down", fileSize - have, Boolean(wt));
          const on = plan.via === "wt" ? wt : null;
          try {
            // What this run wrote, as it goes (the partial file shows it only once closed).
            job.done = have;
            const wrote = async () => job.done;
            const { result, probed } = await this.slice(job, on ? "wt" : "https", plan.probe, wrote, (s) => on
              ? this.fetchMachines(on, job, src, part, have, s, place).then(() => null)
              : this.fetchHttps(job, src, part, have, tagKey, s, treeOf));
            said = result ?? null;
            have = await held();
            if (!probed) break;
            // The probe ran out: the rest goes the other way, from what is kept.
          } catch (e) {
            if (!on || signal.aborted || e instanceof api.ApiError) throw e;
            // The session broke (not a refusal of the server's): on over HTTPS from what is kept.
            wtFailed(e);
            wt = null;
            have = await held();
          }
        }
        if (!placed) {
          // What arrived, hashed here as it came (BLAKE3 in WebAssembly; the blocks' hashes put
          // together, or the file read again if they do not cover it), against the server's hash
          // of the version it came from; on a mismatch nothing is stored and the partial file goes.
          job.note = [job.note, "verifying"].filter(Boolean).join("; ");
          const kept = await part.getFile();
          // Set by `treeOf`, which the checker does not see.
          const blocks = /** @type {Tree | null} */ (tree);
          const ofThese = blocks && blocks.size === kept.size && blocks.version === localStorage.getItem(tagKey);
          const fromBlocks = ofThese ? blocks.hex() : null;
          const got = fromBlocks ?? await hashBlob(kept, undefined, signal);
          // The server's hash of the version that came: in the response of a small file sent
          // whole, else asked for (a request, a round trip).
          const theirs = said?.blake3 && said.etag === localStorage.getItem(tagKey)
            ? { blake3: said.blake3, etag: said.etag } : await api.fileHash(src);
          const changed = theirs.etag !== localStorage.getItem(tagKey);
          if (changed || theirs.blake3 !== got) {
            await dir.removeEntry(partName).catch(() => {});
            localStorage.removeItem(tagKey);
            throw new Error(changed
              ? "the file changed on the server while it downloaded: Retry fetches it again"
              : `BLAKE3 mismatch: this page hashed ${got}, the server has ${theirs.blake3}; nothing was stored`);
          }
          job.note = job.note.replace("verifying", fromBlocks ? "BLAKE3 verified as it arrived" : "BLAKE3 verified");
          await place();
        }
        if (finalName !== name) job.note = `${job.note}; stored as ${finalName}`;
      } finally {
        /** @type {Tree | null} */ (tree)?.drop();
      }
    }, batch);
  }

  /**
   * The rest of a download over HTTPS: a Range request from `have` with the tag of the version
   * kept (else the whole file comes), appended to `part`.
   * @param {Job} job
   * @param {string} src
   * @param {FileSystemFileHandle} part
   * @param {number} have
   * @param {string} tagKey
   * @param {AbortSignal} signal
   * @param {TreeOf} treeOf
   */
  async fetchHttps(job, src, part, have, tagKey, signal, treeOf) {
    const tag = localStorage.getItem(tagKey);
    /** @type {Record<string, string>} */
    const headers = have ? { Range: `bytes=${have}-`, "If-Range": tag ?? "" } : {};
    const url = api.fileUrl(src, this.rateLimit());
    const response = have === job.size && job.size > 0 ? null : await fetch(url, { headers, signal });
    if (response && !response.ok) {
      const body = await response.json().catch(() => ({}));
      throw new api.ApiError(response.status, body.error ?? "error", body.message ?? response.statusText);
    }
    const etag = response?.headers.get("ETag") ?? null;
    if (etag) localStorage.setItem(tagKey, etag);
    // A small file sent whole comes with the server's BLAKE3 of that version.
    const blake3 = response?.status === 200 ? response.headers.get("X-Sluice-Blake3") : null;
    if (response && response.status !== 206) have = 0;
    // The bytes hashed as they come. Without a tag their version is unknown: the file is read
    // again at the end instead.
    const fed = etag ? await (await treeOf(job.size, etag)).feeder(have, await part.getFile(), signal) : null;
    const feed = fed?.feed;
    await this.appendTo(job, part, have, fed?.kept, async (write) => {
      if (!response?.body) return;
      const reader = response.body.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        feed?.(value);
        await write(value);
        this.progress(job, value.byteLength);
      }
    });
    return { blake3, etag };
  }

  /**
   * The rest of a download over WebTransport, run by the transfer machines (fetch.js): what the
   * partial file holds is offered and kept as far as it matches the server's file, the rest comes
   * as pieces hashed as they arrive, and the file goes into place (`place`) once its BLAKE3
   * agrees with the server's.
   * @param {import("./wt.js").Wt} wt
   * @param {Job} job
   * @param {string} src
   * @param {FileSystemFileHandle} part
   * @param {number} have what `job` counts as done
   * @param {AbortSignal} signal
   * @param {() => Promise<void>} place
   */
  async fetchMachines(wt, job, src, part, have, signal, place) {
    const done = await fetchFiles(wt, {
      src, files: [{ path: null, part, have, place }], every: true, signal,
      rateBps: this.rateLimit(),
      progress: (_, n) => this.progress(job, n),
      resumed: (_, kept) => note(job, `resumed at ${size(kept)}`),
      sized: (_, bytes) => { job.size = bytes; },
    });
    const memory = wt.memoryNote();
    if (memory) note(job, memory);
    const verified = done.fromBlocks ? "BLAKE3 verified as it arrived" : "BLAKE3 verified";
    job.note = [job.note, verified, done.repaired ? `${done.repaired} blocks sent again` : ""].filter(Boolean).join("; ");
  }

  /**
   * Writes to `part` from `have` what `fill` gives; what was written stays if it fails.
   * `kept` reads back what `part` held before `have` (its hashing, while the rest comes): the
   * file is replaced when the writer closes, so that waits for it.
   * @param {Job} job
   * @param {FileSystemFileHandle} part
   * @param {number} have
   * @param {Promise<void> | undefined} kept
   * @param {(write: (bytes: Uint8Array) => Promise<void>) => Promise<void>} fill
   */
  async appendTo(job, part, have, kept, fill) {
    if (have) note(job, `resumed at ${size(have)}`);
    job.done = have;
    // Awaited below; its failure is the download's, whenever it comes.
    kept?.catch(() => {});
    const out = await part.createWritable({ keepExistingData: have > 0 });
    try {
      await out.seek(have);
      await out.truncate(have);
      await fill((bytes) => out.write(/** @type {any} */ (bytes)));
      await kept;
      await out.close();
    } catch (e) {
      // What was written stays: the next try resumes from it.
      await kept?.catch(() => {});
      await out.close().catch(() => {});
      throw e;
    }
  }

  /** @param {Job} job */
  cancel(job) {
    job.abort?.abort();
    job.onCancel?.();
    if (job.state === "queued") job.state = "cancelled";
    this.render();
  }

  /** @param {Job} job */
  retry(job) {
    job.state = "queued";
    job.note = "";
    this.pump();
  }

  render() {
    this.renderChoice();
    const body = byId("queue");
    let total = 0;
    let done = 0;
    let rate = 0;
    for (const job of this.jobs) {
      total += job.size;
      done += job.state === "skipped" ? job.size : job.done;
      const r = jobRate(job);
      rate += job.state === "running" ? r : 0;
      if (!job.row) {
        job.row = el("tr", { "data-job": job.id });
        body.append(job.row);
      }
      const left = r > 0 ? (job.size - job.done) / r : NaN;
      const cells = [
        job.name,
        job.dir === "up" ? "upload" : "download",
        `${size(job.done)} / ${size(job.size)}`,
        job.state === "running" ? `${size(r)}/s` : "",
        job.state === "running" ? duration(left) : "",
        job.note ? `${job.state}: ${job.note}` : job.state,
      ];
      const row = job.row;
      // What the row shows, exactly (the test reads it); written when it changed.
      const data = { resumed: String(job.resumed), done: String(job.done), size: String(job.size), state: job.state };
      for (const [key, value] of Object.entries(data)) {
        if (row.dataset[key] !== value) row.dataset[key] = value;
      }
      if (!row.cells.length) {
        row.append(
          el("td", { class: "file", title: job.name }),
          el("td", {}),
          el("td", {}, el("progress", { max: 1, value: 0 }), el("span")),
          el("td", {}),
          el("td", {}),
          el("td", { class: "state" }),
          el("td", { class: "actions" }),
        );
      }
      // The buttons are built again only when which of them shows changes (a run refused as
      // busy goes running, queued, running: its Cancel stays the same button under the mouse).
      const actions = job.state === "running" || job.state === "queued" ? "cancel"
        : job.state === "failed" || job.state === "cancelled" ? "retry" : "";
      if (row.dataset.actions !== actions) {
        row.dataset.actions = actions;
        const button = actions === "cancel" ? el("button", { class: "cancel" }, "Cancel")
          : actions === "retry" ? el("button", { class: "retry" }, "Retry") : null;
        button?.addEventListener("click", () => (actions === "cancel" ? this.cancel(job) : this.retry(job)));
        row.cells[6].replaceChildren(...(button ? [button] : []));
      }
      // Only what changed is written: of a folder's 200 rows, one or two change between draws.
      const td = row.cells;
      setText(td[0], cells[0]);
      setText(td[1], cells[1]);
      const bar = /** @type {HTMLProgressElement} */ (td[2].firstChild);
      const [max, value] = [job.size || 1, job.size ? job.done : job.state === "done" ? 1 : 0];
      if (bar.max !== max) bar.max = max;
      if (bar.value !== value) bar.value = value;
      setText(/** @type {Node} */ (td[2].lastChild), ` ${cells[2]}`);
      setText(td[3], cells[3]);
      setText(td[4], cells[4]);
      setText(td[5], cells[5]);
      if (td[5].title !== cells[5]) td[5].title = cells[5];
    }
    const kept = new Set(this.jobs.map((j) => j.row));
    for (const row of [...body.children]) {
      if (!kept.has(/** @type {HTMLTableRowElement} */ (row))) row.remove();
    }
    const bar = /** @type {HTMLProgressElement} */ (byId("total-bar"));
    bar.max = total || 1;
    bar.value = total ? done : 0;
    const left = rate > 0 ? (total - done) / rate : NaN;
    byId("total").textContent = this.jobs.length
      ? `${size(done)} of ${size(total)} · ${size(rate)}/s · ETA ${duration(left) || "-"}`
      : "";
  }
}

/** The origin's localStorage, or none where the browser refuses it (storage turned off). */
function pageStore() {
  try {
    return window.localStorage;
  } catch {
    return null;
  }
}

/**
 * Bytes per second over the last seconds.
 * @param {Job} job
 */
function jobRate(job) {
  const s = job.samples;
  if (s.length < 2) return 0;
  const dt = (s[s.length - 1].t - s[0].t) / 1000;
  // Blocks in flight that a cut or a probe's end took back count against it: never below 0.
  return dt > 0 ? Math.max(0, (s[s.length - 1].bytes - s[0].bytes) / dt) : 0;
}

/**
 * `name (n).ext` for the first n free in `dir`.
 * @param {FileSystemDirectoryHandle} dir
 * @param {string} name
 */
async function freeName(dir, name) {
  const dot = name.lastIndexOf(".");
  const [stem, ext] = dot > 0 ? [name.slice(0, dot), name.slice(dot)] : [name, ""];
  for (let n = 1; n < 1000; n += 1) {
    const candidate = `${stem} (${n})${ext}`;
    const taken = await dir.getFileHandle(candidate).then(() => true, () => false);
    if (!taken) return candidate;
  }
  throw new Error(`${name}: no free name to keep both`);
}

export { join };
