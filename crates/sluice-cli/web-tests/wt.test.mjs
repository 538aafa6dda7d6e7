// A download's count of the bytes of its pieces (web/js/wt.js, `Wt.piece`), in node: a piece
// cut off while its download takes pieces takes back what it counted; one cut off after its
// download ended (a probe ran out, a cancel: the server resets what it had under way) takes
// nothing back from the count of the try after it, which counts from what its file kept. Run by
// tests/web_browser.rs before the browser test.

import assert from "node:assert/strict";
import { Wt, startWords } from "../web/js/wt.js";

/** A session that brings no streams and never closes. */
const session = { closed: new Promise(() => {}), incomingUnidirectionalStreams: new ReadableStream() };
const wt = new Wt([session], { streams: 4 });
// The page says so of a piece cut off under a running download: quiet here.
console.warn = () => {};

/**
 * A piece's stream (push.rs): its head (tag, phase 2, offset 12345, `len`), then `brought` of
 * its bytes; the stream's controller, to cut it off.
 * @param {number} tag
 * @param {number} len
 * @param {number} brought
 */
function pieceStream(tag, len, brought) {
  /** @type {ReadableStreamDefaultController<Uint8Array>} */
  let cut;
  const stream = new ReadableStream({ start(c) { cut = c; } });
  const head = new DataView(new ArrayBuffer(24));
  head.setBigUint64(0, BigInt(tag));
  head.setUint32(8, 2);
  head.setBigUint64(12, 12345n);
  head.setUint32(20, len);
  cut.enqueue(new Uint8Array(head.buffer));
  cut.enqueue(new Uint8Array(brought));
  return { stream, cut };
}

/** Waits until `done()` holds (the reads run as the event loop turns). */
async function until(done) {
  for (let i = 0; i < 1000 && !done(); i += 1) await new Promise((r) => setImmediate(r));
  assert.ok(done(), "in time");
}

// Counted as they come; a piece cut off under its download takes them back.
let running = 0;
/** @type {[number, number][]} */
const whose = [];
const first = wt.route({ piece: () => {}, progress: (phase, offset, n) => { running += n; whose.push([phase, offset]); } });
const a = pieceStream(first, 8, 5);
const readingA = wt.piece(a.stream);
await until(() => running === 5);
a.cut.error(new Error("reset"));
await readingA;
assert.equal(running, 0, "a piece cut off under its download takes back what it counted");
assert.ok(whose.length >= 2 && whose.every(([p, o]) => p === 2 && o === 12345),
  `each count names its piece's phase and offset: ${JSON.stringify(whose)}`);

// The download ends (its try stopped) while a piece comes: what it brings after, and its cut,
// are no longer that download's to count.
let ended = 0;
const second = wt.route({ piece: () => {}, progress: (_phase, _offset, n) => { ended += n; } });
const b = pieceStream(second, 8, 5);
const readingB = wt.piece(b.stream);
await until(() => ended === 5);
wt.unroute(second);
const counted = ended;
b.cut.enqueue(new Uint8Array(2));
b.cut.error(new Error("reset"));
await readingB;
assert.equal(ended, counted, `a piece of a download that ended counts nothing more: ${ended} after ${counted}`);
console.log("wt.test: the pieces' counts hold");

// How the lanes started, said once: on the first download only, and never for a fresh start.
assert.equal(wt.memoryNote(), null, "a fresh start says nothing");
wt.memory = { rate_bps: 80_400_000, age_s: 200 };
assert.equal(wt.memoryNote(), "started from path memory (80 Mbit/s, kept 3 min ago)");
assert.equal(wt.memoryNote(), null, "said once");
assert.equal(startWords({ rate_bps: 1.2e9, age_s: 45 }), "1200 Mbit/s, kept 45 s ago");
assert.equal(startWords({ rate_bps: 5e6, age_s: 7200 }), "5 Mbit/s, kept 2 h ago");
console.log("wt.test: a start from path memory is said once");
