// sluice-session's transfer machines in the page: the very `Receiving` a CLI download runs,
// compiled into the page's module (crates/sluice-wasm/src/machines.rs). The page hands in what
// the server said (its frames, as they came on the control stream) and what the page did (JSON
// events); the machine answers with frames to write and JSON effects to do. It reads no clock:
// the page gives it performance.now().

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
