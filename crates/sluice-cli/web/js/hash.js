// BLAKE3 in the page: Sluice's own hash (the `blake3` crate, as the CLI and the server use it),
// compiled from Rust to WebAssembly (crates/sluice-wasm) and served by this server at
// /sluice.wasm. The page hashes what it uploads (the server checks it before storing the file)
// and what it downloads (compared with the server's BLAKE3 of the same version).

/** Bytes copied into the module at once. */
const PIECE = 1 << 20;
/** Bytes read from a file at once. */
const READ = 8 << 20;

/**
 * @typedef {object} Exports
 * @property {WebAssembly.Memory} memory
 * @property {(len: number) => number} sluice_buffer
 * @property {() => number} sluice_hasher_new
 * @property {(id: number, len: number) => number} sluice_hasher_update
 * @property {(id: number) => number} sluice_hasher_finish
 * @property {(id: number) => void} sluice_hasher_drop
 */

/** @type {Promise<Exports> | null} */
let loaded = null;

/** @returns {Promise<Exports>} the module, loaded once */
function module() {
  loaded ??= (async () => {
    const response = await fetch("/sluice.wasm");
    if (!response.ok) throw new Error(`/sluice.wasm: ${response.status}`);
    const { instance } = await WebAssembly.instantiate(await response.arrayBuffer(), {});
    return /** @type {Exports} */ (/** @type {unknown} */ (instance.exports));
  })();
  return loaded;
}

/** One file's hash, fed piece by piece. */
export class Blake3 {
  /**
   * @param {Exports} x
   * @param {number} id
   */
  constructor(x, id) {
    this.x = x;
    this.id = id;
  }

  static async create() {
    const x = await module();
    const id = x.sluice_hasher_new();
    if (!id) throw new Error("too many files are being hashed at once");
    return new Blake3(x, id);
  }

  /** @param {Uint8Array} bytes */
  update(bytes) {
    for (let at = 0; at < bytes.length; at += PIECE) {
      const piece = bytes.subarray(at, at + PIECE);
      // The buffer's address, and the memory's ArrayBuffer, may change as the module grows.
      const ptr = this.x.sluice_buffer(piece.length);
      new Uint8Array(this.x.memory.buffer, ptr, piece.length).set(piece);
      if (!this.x.sluice_hasher_update(this.id, piece.length)) throw new Error("hashing failed");
    }
  }

  /** @returns {string} the hash, 64 hex digits; the hasher ends */
  hex() {
    if (!this.x.sluice_hasher_finish(this.id)) throw new Error("hashing failed");
    const ptr = this.x.sluice_buffer(32);
    const out = new Uint8Array(this.x.memory.buffer, ptr, 32);
    return [...out].map((b) => b.toString(16).padStart(2, "0")).join("");
  }

  /** Ends the hasher without a hash. */
  drop() {
    this.x.sluice_hasher_drop(this.id);
  }
}

/**
 * The BLAKE3 of `blob` (a file, or part of one), read in pieces.
 * @param {Blob} blob
 * @param {(done: number) => void} [progress] bytes hashed so far
 * @param {AbortSignal} [signal]
 * @returns {Promise<string>}
 */
export async function hashBlob(blob, progress, signal) {
  const h = await Blake3.create();
  try {
    for (let at = 0; at < blob.size; at += READ) {
      if (signal?.aborted) throw new Error("cancelled");
      h.update(new Uint8Array(await blob.slice(at, at + READ).arrayBuffer()));
      progress?.(Math.min(blob.size, at + READ));
    }
  } catch (e) {
    h.drop();
    throw e;
  }
  return h.hex();
}
