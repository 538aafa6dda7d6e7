// sluice-session's transfer machines in the page: the very `Receiving` a CLI download runs and
// `Sending` a CLI upload runs, compiled into the page's module (crates/sluice-wasm/src/machines.rs). The page hands in what
// the server said (its frames, as they came on the control stream) and what the page did (JSON
// events); the machine answers with frames to write and JSON effects to do. It reads no clock:
// the page gives it performance.now().

import * as api from "./api.js";
import { module } from "./hash.js";

/** @typedef {import("./hash.js").Exports} Exports */

/** @typedef {{ frame: Uint8Array } | { json: any }} Effect */

/** A machine of the module, by its id. */
export class Machine {
  /**
   * @param {Exports} x
   * @param {number} id
   */
  constructor(x, id) {
    this.x = x;
    this.id = id;
  }

  /**
   * A download's machine; `early`: the server was asked to start the data right behind its
   * manifest (the page holds nothing of the file: the round trip of its `Want` is saved).
   * @param {boolean} early
   */
  static async receiving(early) {
    const x = await module();
    const id = x.sluice_machine_receive(performance.now(), early ? 1 : 0);
    if (!id) throw new Error(`the page's machine: ${refusal(x)}`);
    return new Machine(x, id);
  }

  /**
   * An upload's machine, of the files `manifest` lists (entries as the CLI's manifest has them:
   * `{path, kind: "file", size, mtime, mode}`).
   * @param {any[]} manifest
   */
  static async sending(manifest) {
    const x = await module();
    const m = new Machine(x, 0);
    const len = m.put(new TextEncoder().encode(JSON.stringify(manifest)));
    m.id = x.sluice_machine_send(performance.now(), len);
    if (!m.id) throw new Error(`the page's machine: ${refusal(x)}`);
    return m;
  }

  /**
   * Copies `bytes` into the module's buffer: their length.
   * @param {Uint8Array} bytes
   */
  put(bytes) {
    const ptr = this.x.sluice_buffer(bytes.length);
    if (!ptr) throw new Error(`${bytes.length} bytes are too many for the page's machine`);
    new Uint8Array(this.x.memory.buffer, ptr, bytes.length).set(bytes);
    return bytes.length;
  }

  /**
   * The server's frame (4 bytes of length, then the message), as it came.
   * @param {Uint8Array} frame
   */
  message(frame) {
    const len = this.put(frame);
    if (!this.x.sluice_machine_message(this.id, performance.now(), len)) {
      throw new Error(`the page's machine: ${refusal(this.x)}`);
    }
  }

  /**
   * What the page did (see crates/sluice-wasm/src/machines.rs, `Event`).
   * @param {any} event
   */
  event(event) {
    const len = this.put(new TextEncoder().encode(JSON.stringify(event)));
    if (!this.x.sluice_machine_event(this.id, performance.now(), len)) {
      throw new Error(`the page's machine: ${refusal(this.x)}`);
    }
  }

  /** @returns {Effect | null} what the machine asks for next */
  effect() {
    const len = this.x.sluice_machine_effect(this.id) >>> 0;
    if (len === 0) return null;
    if (len === 0xffffffff) throw new Error("the page's machine asked for more than its buffer holds");
    const out = new Uint8Array(this.x.memory.buffer, this.x.sluice_buffer(len), len).slice();
    if (out[0] === 1) return { frame: out.subarray(1) };
    return { json: JSON.parse(new TextDecoder().decode(out.subarray(1))) };
  }

  /** @returns {number | null} when the machine wants its timeout (performance.now()'s time) */
  deadline() {
    const at = this.x.sluice_machine_deadline(this.id);
    return at < 0 ? null : at;
  }

  end() {
    this.x.sluice_machine_end(this.id);
  }
}

/**
 * The module's last refusal, in words.
 * @param {Exports} x
 */
function refusal(x) {
  const len = x.sluice_machine_error() >>> 0;
  return new TextDecoder().decode(new Uint8Array(x.memory.buffer, x.sluice_buffer(len), len)) || "refused";
}

/** What happened to the page meanwhile, for the machine, in the order it happened. */
export class Inbox {
  constructor() {
    /** @type {any[]} */
    this.items = [];
    /** @type {(() => void) | null} */
    this.wake = null;
  }

  /** @param {any} item */
  post(item) {
    this.items.push(item);
    this.wake?.();
  }

  /**
   * The next item, or null once `ms` passed without one (null `ms`: no limit).
   * @param {number | null} ms
   */
  async next(ms) {
    if (!this.items.length) {
      /** @type {any} */
      let timer = null;
      await new Promise((resolve) => {
        this.wake = () => resolve(undefined);
        if (ms !== null) timer = setTimeout(() => resolve(undefined), Math.max(0, ms));
      });
      this.wake = null;
      clearTimeout(timer);
    }
    return this.items.length ? this.items.shift() : null;
  }
}

/**
 * The error a machine's failure (`done.error`) stands for: the server's word, or this page's;
 * a session that broke under it is a plain `Error`, so the caller goes on over HTTPS, as for any
 * broken session (a download from the start: its HTTPS leg resumes only with the `ETag` of an
 * earlier HTTPS leg, which the machines do not learn; an upload from what the server's HTTPS
 * uploads kept, not from the machines' partial file).
 * @param {any} f
 */
export function failure(f) {
  if (f.local?.code === "network" || f.timeout) return new Error(f.local?.message ?? f.timeout);
  const [code, message] = f.peer ? [f.peer.code, f.peer.message]
    : f.local ? [f.local.code, f.local.message]
    : ["protocol", f.protocol ?? JSON.stringify(f)];
  return new api.ApiError(0, code, message);
}


/**
 * Opens a machine's transfer on the page's session: its request (`head`) on a stream kept open
 * both ways, whose frames (the peer's messages) are posted to `inbox` as they come, then its end
 * (`finished`) or failure (`failed`).
 * @param {import("./wt.js").Wt} wt
 * @param {any} head
 * @param {Inbox} inbox
 */
export async function openControl(wt, head, inbox) {
  const c = await wt.open(head);
  (async () => {
    try {
      for (let f = await c.reader.frame(); f; f = await c.reader.frame()) inbox.post({ frame: f });
      inbox.post({ finished: true });
    } catch (e) {
      inbox.post({ failed: e });
    }
  })();
  return c;
}

/**
 * Runs `machine` on its control stream `c` to its end, as every driver does: writes the frames
 * it asks for, answers its `bind` (the pieces go on the session's own streams), and hands its
 * other effects to `h.act`; when it has none, `h.idle` may act (true) instead of a wait on the
 * inbox, whose items of the driver's own go to `h.take`. Returns the machine's `done.ok`; its
 * `done.error` is thrown.
 * @param {Machine} machine
 * @param {Inbox} inbox
 * @param {{ writer: WritableStreamDefaultWriter<Uint8Array> }} c
 * @param {string} what the control stream, in a failure's words
 * @param {{ act: (j: any) => Promise<void>, idle?: () => Promise<boolean>, take: (item: any) => void }} h
 */
export async function drive(machine, inbox, c, what, h) {
  const state = { peerOpen: true, what };
  for (;;) {
    for (let e = machine.effect(); e; e = machine.effect()) {
      if ("frame" in e) {
        await c.writer.write(e.frame);
        continue;
      }
      const j = e.json;
      if (j.done?.ok) {
        await c.writer.close().catch(() => {});
        return j.done.ok;
      }
      if (j.done?.error) throw failure(j.done.error);
      if (j.bind) machine.event({ bound: { phase: j.bind.phase } });
      else await h.act(j);
    }
    if (await h.idle?.()) continue;
    const item = await nextItem(machine, inbox, state);
    if (item !== null) h.take(item);
  }
}

/**
 * The inbox's next item of a driver's own, once `machine` has what every driver hands it
 * alike: the peer's frames and the end of its stream, a failure of the stream (in `what`'s
 * words), a deadline passed (then null: the machine may have effects). A cancel is thrown.
 * @param {Machine} machine
 * @param {Inbox} inbox
 * @param {{ peerOpen: boolean, what: string }} state
 */
async function nextItem(machine, inbox, state) {
  const deadline = machine.deadline();
  const item = await inbox.next(deadline === null ? null : deadline - performance.now());
  if (item === null) machine.event("timeout");
  else if (item.cancelled) throw new api.ApiError(0, "cancelled", "cancelled");
  else if (item.frame) machine.message(item.frame);
  else if (item.finished) {
    if (state.peerOpen) machine.event("peer_finished");
    state.peerOpen = false;
  } else if (item.failed) {
    const why = String(item.failed?.message ?? item.failed);
    machine.event({ failure: { code: "network", message: `${state.what} failed: ${why}` } });
  } else return item;
  return null;
}
