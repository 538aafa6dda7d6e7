// The page's choice of WebTransport or HTTPS (web/js/choose.js), in node: deterministic (the
// clock is the test's). Run by tests/web_browser.rs before the browser test.

import assert from "node:assert/strict";
import { Chooser, MEASURE_MIN_MS, PROBE_MIN_BYTES, STALE_MS, STORE_KEY } from "../web/js/choose.js";

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

// The figures outlive the page: a Chooser on the same store knows them, while they are fresh.
/** A store in memory, as the page's localStorage. */
const memory = () => {
  const items = new Map();
  return { getItem: (k) => items.get(k) ?? null, setItem: (k, v) => void items.set(k, String(v)), items };
};
const kept = memory();
const first = new Chooser(() => t, kept);
first.record("down", "wt", 40 << 20, 1000);
first.record("down", "https", 60 << 20, 1000);
const reloaded = new Chooser(() => t, kept);
assert.equal(reloaded.rate("down", "https"), 60 << 20);
assert.deepEqual(reloaded.plan("auto", "down", BIG, true), { via: "https", probe: false });
t += STALE_MS;
assert.equal(new Chooser(() => t, kept).rate("down", "wt"), null, "stale after a reload too");
// A reset is kept as well: a fresh figure, then the reset, then a reload.
first.record("down", "https", 60 << 20, 1000);
assert.equal(new Chooser(() => t, kept).rate("down", "https"), 60 << 20);
first.reset();
assert.equal(new Chooser(() => t, kept).rate("down", "https"), null, "forgotten after a reset");
// A figure from the future (the clock was set back) is not fresh; at its own time it is.
first.record("up", "https", 1 << 20, 1000);
assert.equal(new Chooser(() => t, kept).rate("up", "https"), 1 << 20);
assert.equal(new Chooser(() => t - 1, kept).rate("up", "https"), null);
// Whatever else is in the store is ignored, never thrown: it is measured again.
for (const junk of ["not json", "null", "[]", '{"up":{"wt":{"rate":"fast","at":0}}}',
  '{"up":{"wt":{"rate":-1,"at":0}},"down":{"https":{"rate":1e400,"at":0}}}',
  '{"__proto__":{"wt":{"rate":1,"at":0}}}']) {
  const bad = memory();
  bad.items.set(STORE_KEY, junk);
  const c2 = new Chooser(() => 0, bad);
  for (const dir of ["up", "down"]) for (const via of ["wt", "https"]) {
    assert.equal(c2.rate(dir, via), null, `${junk}: ${dir} ${via}`);
  }
}
// A store that refuses (storage off, or full) is the same as none.
const refusing = { getItem: () => { throw new Error("denied"); }, setItem: () => { throw new Error("full"); } };
const off = new Chooser(() => t, refusing);
off.record("up", "wt", 1 << 20, 1000);
assert.equal(off.rate("up", "wt"), 1 << 20);

console.log("choose.test: all checks passed");
