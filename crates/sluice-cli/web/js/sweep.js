// FFTM's sweep, over this page's connection: for each block size and number of streams, move
// a set amount (the server sends zeros, or drops what it gets: /api/sweep), in requests of one
// block each, that many at once; chart the goodput of each and recommend the best. The token's
// limits hold (its transfers at once, its rate): a cell beyond them says so.

import * as api from "./api.js";
import { byId, size } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 480;
const HEIGHT = 160;
const AXIS = 28;

/**
 * @typedef {object} Cell
 * @property {number} block bytes per request
 * @property {number} streams requests at once
 * @property {number} rate bytes per second (0: failed)
 * @property {string} error
 */

/**
 * A list of positive whole numbers, `1, 2, 4`.
 * @param {string} text
 */
function numbers(text) {
  return text.split(/[\s,]+/).map(Number).filter((n) => Number.isInteger(n) && n > 0).slice(0, 8);
}

/**
 * Moves `total` bytes in requests of `block`, `streams` at once: goodput in bytes per second.
 * @param {"down" | "up"} dir
 * @param {number} total
 * @param {number} block
 * @param {number} streams
 */
async function measure(dir, total, block, streams) {
  let next = 0;
  const worker = async () => {
    while (next < total) {
      const n = Math.min(block, total - next);
      next += n;
      if (dir === "down") await api.sweepDown(n);
      else await api.sweepUp(n);
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: streams }, worker));
  return total / Math.max(1e-3, (performance.now() - started) / 1000);
}

export class Sweep {
  constructor() {
    /** @type {Cell[]} */
    this.cells = [];
    byId("sweep-run").addEventListener("click", () => { this.run(); });
  }

  async run() {
    const run = /** @type {HTMLButtonElement} */ (byId("sweep-run"));
    const dir = /** @type {"down" | "up"} */ (/** @type {HTMLSelectElement} */ (byId("sweep-dir")).value);
    const mib = Number(/** @type {HTMLInputElement} */ (byId("sweep-mib")).value);
    const total = Math.max(1, Math.min(256, Number.isFinite(mib) ? mib : 16)) * (1 << 20);
    const blocks = numbers(/** @type {HTMLInputElement} */ (byId("sweep-blocks")).value).map((k) => k << 10);
    const streams = numbers(/** @type {HTMLInputElement} */ (byId("sweep-streams")).value).filter((s) => s <= 16);
    const result = byId("sweep-result");
    if (!blocks.length || !streams.length) {
      result.textContent = "give block sizes (KiB) and stream counts, e.g. 256, 1024 and 1, 2, 4";
      return;
    }
    run.disabled = true;
    this.cells = [];
    try {
      for (const block of blocks) {
        for (const s of streams) {
          result.textContent = `measuring ${size(block)} blocks × ${s} streams…`;
          /** @type {Cell} */
          const cell = { block, streams: s, rate: 0, error: "" };
          try {
            cell.rate = await measure(dir, total, block, s);
          } catch (e) {
            cell.error = /** @type {Error} */ (e).message;
          }
          this.cells.push(cell);
          this.draw();
        }
      }
      const best = this.cells.reduce((a, b) => (b.rate > a.rate ? b : a));
      const failed = this.cells.filter((c) => c.error).length;
      result.dataset.done = "true";
      result.textContent = best.rate > 0
        ? `Recommended: ${size(best.block)} blocks × ${best.streams} stream${best.streams > 1 ? "s" : ""}: ` +
          `${size(Math.round(best.rate))}/s (${dir === "down" ? "download" : "upload"}, ${size(total)} per cell)` +
          (failed ? `; ${failed} cell${failed > 1 ? "s" : ""} failed: ${this.cells.find((c) => c.error)?.error}` : "")
        : `every cell failed: ${this.cells[0]?.error ?? ""}`;
    } finally {
      run.disabled = false;
    }
  }

  /** The cells as bars, grouped by block size, one per stream count. */
  draw() {
    const host = byId("sweep-chart");
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", `0 0 ${WIDTH} ${HEIGHT}`);
    svg.setAttribute("id", "sweep-svg");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", "goodput by block size and streams");
    const peak = Math.max(1, ...this.cells.map((c) => c.rate));
    const width = (WIDTH - 8) / Math.max(1, this.cells.length);
    this.cells.forEach((c, i) => {
      const h = (c.rate / peak) * (HEIGHT - AXIS - 14);
      const x = 4 + i * width;
      const bar = document.createElementNS(SVG, "rect");
      bar.setAttribute("x", (x + 2).toFixed(1));
      bar.setAttribute("y", (HEIGHT - AXIS - h).toFixed(1));
      bar.setAttribute("width", Math.max(1, width - 4).toFixed(1));
      bar.setAttribute("height", h.toFixed(1));
      bar.setAttribute("class", c.error ? "bar failed" : `bar s${Math.min(c.streams, 8)}`);
      const tip = document.createElementNS(SVG, "title");
      tip.textContent = c.error || `${size(Math.round(c.rate))}/s`;
      bar.append(tip);
      const label = document.createElementNS(SVG, "text");
      label.setAttribute("x", (x + width / 2).toFixed(1));
      label.setAttribute("y", String(HEIGHT - AXIS + 11));
      label.textContent = `${size(c.block).replace(".0 ", " ")}×${c.streams}`;
      const value = document.createElementNS(SVG, "text");
      value.setAttribute("x", (x + width / 2).toFixed(1));
      value.setAttribute("y", (HEIGHT - AXIS - h - 3).toFixed(1));
      value.textContent = c.error ? "failed" : `${size(Math.round(c.rate)).replace(".0 ", " ")}/s`;
      svg.append(bar, label, value);
    });
    host.replaceChildren(svg);
  }
}
