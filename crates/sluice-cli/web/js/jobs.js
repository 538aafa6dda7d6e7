// The panel of jobs between servers: copies from one server to another run as jobs of the
// destination server (third-party transfers), which go on when this tab is closed. The panel
// lists the login's jobs on this server and on each server the panes added, as the servers
// report them, and cancels them there.

import * as api from "./api.js";
import { byId, el, size, time } from "./dom.js";

/** How often the list is asked for while a job runs. */
const POLL_MS = 1000;

/**
 * A job's error as this page words it: the server names the CLI's flag where the page has a
 * setting of its own.
 * @param {string} error
 */
function said(error) {
  return error.replace(/choose --overwrite [a-z|-]+/, "choose what happens to them under \"If a file exists\" (replace, skip, if newer)");
}

export class Jobs {
  /** @param {() => void} onEnd called when a job this panel saw running has ended */
  constructor(onEnd) {
    this.section = byId("jobs");
    this.body = byId("jobs-list");
    this.status = byId("jobs-status");
    this.onEnd = onEnd;
    /** @type {Set<string>} jobs seen running */
    this.running = new Set();
    /** @type {Map<string, HTMLTableRowElement>} each job's row, kept from one poll to the next */
    this.rows = new Map();
    /** @type {ReturnType<typeof setTimeout> | null} */
    this.timer = null;
  }

  /** Asks the servers for their jobs now, and again while any runs. */
  async refresh() {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    let answer;
    try {
      answer = await api.jobs();
    } catch (e) {
      this.status.textContent = /** @type {Error} */ (e).message;
      return;
    }
    const rows = [];
    const problems = [];
    const running = new Set();
    for (const server of answer.servers) {
      // A token without the write right there has no jobs there to list.
      if (server.error && server.error.error !== "refused") problems.push(server.error.message);
      for (const job of server.jobs) {
        const key = `${server.server}/${job.id}`;
        if (job.phase === "running") running.add(key);
        rows.push(this.row(key, server.server, server.label, job));
      }
    }
    const ended = [...this.running].some((k) => !running.has(k));
    this.running = running;
    for (const [key, row] of this.rows) if (!rows.includes(row)) this.rows.delete(key);
    // The same rows again, in the servers' order: a poll does not replace a button under the mouse.
    rows.forEach((row, i) => {
      if (this.body.children[i] !== row) this.body.insertBefore(row, this.body.children[i] ?? null);
    });
    while (this.body.children.length > rows.length) this.body.lastElementChild?.remove();
    this.section.hidden = rows.length === 0 && problems.length === 0;
    this.status.textContent = problems.join("\n");
    if (ended) this.onEnd();
    if (running.size) this.timer = setTimeout(() => this.refresh(), POLL_MS);
  }

  /**
   * The job's row, made the first time and brought up to date after.
   * @param {string} key
   * @param {string} server
   * @param {string} label
   * @param {api.Job} job
   */
  row(key, server, label, job) {
    let row = this.rows.get(key);
    if (!row) {
      const cancel = el("button", { class: "cancel" }, "Cancel");
      cancel.addEventListener("click", async () => {
        try {
          await api.cancelJob(server, job.id);
        } catch (e) {
          this.status.textContent = /** @type {Error} */ (e).message;
        }
        this.refresh();
      });
      row = el("tr", { "data-job": job.id },
        el("td", { class: "server" }, label),
        el("td", { class: "from" }, job.from),
        el("td", { class: "dest" }, `/${job.dest}`),
        el("td", {}, el("progress", { max: 1, value: 0 }), el("span")),
        el("td", { class: "phase" }),
        el("td", { class: "when" }),
        el("td", { class: "error" }),
        el("td", {}, cancel));
      this.rows.set(key, row);
    }
    row.dataset.phase = job.phase;
    const td = row.cells;
    const bar = /** @type {HTMLProgressElement} */ (td[3].firstChild);
    bar.max = Math.max(job.total, 1);
    bar.value = job.bytes;
    /** @type {HTMLElement} */ (td[3].lastChild).textContent = ` ${size(job.bytes)} of ${size(job.total)}, ${job.files} files`;
    td[4].textContent = job.phase;
    td[5].textContent = time(job.ended ?? job.started);
    td[6].textContent = said(job.error ?? "");
    td[6].title = job.error ?? "";
    /** @type {HTMLElement} */ (td[7].firstChild).hidden = job.phase !== "running" && job.phase !== "stalled";
    return row;
  }
}
