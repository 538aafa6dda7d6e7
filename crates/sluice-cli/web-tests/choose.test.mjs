// The page's choice of WebTransport or HTTPS (web/js/choose.js), in node: deterministic (the
// clock is the test's). Run by tests/web_browser.rs before the browser test.

import assert from "node:assert/strict";
import { Chooser, MEASURE_MIN_MS, PROBE_MIN_BYTES, STALE_MS } from "../web/js/choose.js";

let t = 0;
const c = new Chooser(() => t);
const BIG = PROBE_MIN_BYTES;
const SMALL = PROBE_MIN_BYTES - 1;

// Forced modes and a missing session decide alone, without a probe.
assert.deepEqual(c.plan("https", "up", BIG, true), { via: "https", probe: false });
assert.deepEqual(c.plan("webtransport", "up", BIG, true), { via: "wt", probe: false });
assert.deepEqual(c.plan("auto", "up", BIG, false), { via: "https", probe: false });
assert.deepEqual(c.plan("webtransport", "up", BIG, false), { via: "https", probe: false });

// Nothing known: a small file goes by WebTransport, a big one probes it, then HTTPS.
assert.deepEqual(c.plan("auto", "up", SMALL, true), { via: "wt", probe: false });
assert.deepEqual(c.plan("auto", "up", BIG, true), { via: "wt", probe: true });
// A run too short measures nothing.
c.record("up", "wt", 1 << 20, MEASURE_MIN_MS - 1);
assert.equal(c.rate("up", "wt"), null);
c.record("up", "wt", 3 << 20, 3000);
assert.equal(c.rate("up", "wt"), (3 << 20) / 3);
assert.deepEqual(c.plan("auto", "up", BIG, true), { via: "https", probe: true });
// Only HTTPS was slower or faster once both are known; the other direction knows nothing.
c.record("up", "https", 72 << 20, 3000);
assert.deepEqual(c.plan("auto", "up", BIG, true), { via: "https", probe: false });
assert.deepEqual(c.plan("auto", "up", SMALL, true), { via: "https", probe: false });
assert.deepEqual(c.plan("auto", "down", BIG, true), { via: "wt", probe: true });
c.record("down", "wt", 90 << 20, 1000);
c.record("down", "https", 60 << 20, 1000);
assert.deepEqual(c.plan("auto", "down", BIG, true), { via: "wt", probe: false });

// A probe that moved nothing in its time is a figure (0), not "unknown": it is not probed
// again and again, and the other way wins.
const z = new Chooser(() => t);
z.record("up", "wt", 0, 3000);
assert.equal(z.rate("up", "wt"), 0);
assert.deepEqual(z.plan("auto", "up", BIG, true), { via: "https", probe: true });
z.record("up", "https", 0, 100);
assert.deepEqual(z.plan("auto", "up", BIG, true), { via: "https", probe: true });
z.record("up", "https", 1 << 20, 3000);
assert.deepEqual(z.plan("auto", "up", BIG, true), { via: "https", probe: false });
z.record("up", "wt", -1, 3000);
assert.equal(z.rate("up", "wt"), 0);

// Known for one way only: a small file takes the known one.
const d = new Chooser(() => t);
d.record("up", "https", 10 << 20, 1000);
assert.deepEqual(d.plan("auto", "up", SMALL, true), { via: "https", probe: false });
assert.deepEqual(d.plan("auto", "up", BIG, true), { via: "wt", probe: true });

// Stale figures are measured again, the older first.
t += STALE_MS;
assert.equal(c.rate("up", "https"), null);
assert.deepEqual(c.plan("auto", "up", BIG, true), { via: "wt", probe: true });
c.record("up", "wt", 1 << 20, 1000);
assert.deepEqual(c.plan("auto", "up", BIG, true), { via: "https", probe: true });

// A reset forgets everything.
c.reset();
assert.equal(c.rate("down", "wt"), null);
assert.deepEqual(c.plan("auto", "down", BIG, true), { via: "wt", probe: true });

console.log("choose.test: all checks passed");
