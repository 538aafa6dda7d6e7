// The transfer panel's rate chart: the total rate of the last minute as a line in an inline SVG
// (built with DOM calls like the rest of the page: no markup, no inline style, no library).

import { size } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 240;
const HEIGHT = 48;
/** The time the chart spans, in milliseconds. */
const SPAN_MS = 60_000;

export class RateChart {
  /**
   * @param {HTMLElement} host where the chart goes
   * @param {HTMLElement} label where its peak is said
   */
  constructor(host, label) {
    this.svg = document.createElementNS(SVG, "svg");
    this.svg.setAttribute("viewBox", `0 0 ${WIDTH} ${HEIGHT}`);
    this.svg.setAttribute("id", "rate-chart");
    this.svg.setAttribute("role", "img");
    this.svg.setAttribute("aria-label", "total rate over the last minute");
    this.area = document.createElementNS(SVG, "polygon");
    this.area.setAttribute("class", "area");
    this.line = document.createElementNS(SVG, "polyline");
    this.line.setAttribute("class", "line");
    this.svg.append(this.area, this.line);
    host.append(this.svg);
    this.label = label;
    /** @type {{ t: number, rate: number }[]} rate in bytes per second at time t (ms) */
    this.points = [];
  }

  /**
   * Adds the rate at `now` and draws the last minute.
   * @param {number} now milliseconds (performance.now())
   * @param {number} rate bytes per second
   */
  add(now, rate) {
    this.points.push({ t: now, rate });
    while (this.points.length > 2 && now - this.points[0].t > SPAN_MS) this.points.shift();
    const peak = Math.max(...this.points.map((p) => p.rate));
    const scale = peak > 0 ? (HEIGHT - 2) / peak : 0;
    const xy = this.points.map((p) => {
      const x = WIDTH - ((now - p.t) / SPAN_MS) * WIDTH;
      return `${x.toFixed(1)},${(HEIGHT - p.rate * scale).toFixed(1)}`;
    });
    this.line.setAttribute("points", xy.join(" "));
    const first = xy[0]?.split(",")[0] ?? WIDTH;
    this.area.setAttribute("points", `${first},${HEIGHT} ${xy.join(" ")} ${WIDTH},${HEIGHT}`);
    this.label.textContent = `peak ${size(Math.round(peak))}/s`;
  }
}
