// BLAKE3 in the page: Sluice's own hash (the `blake3` crate, as the CLI and the server use it),
// compiled from Rust to WebAssembly (crates/sluice-wasm) and served by this server at
// /sluice.wasm. The page hashes what it uploads (the server checks it before storing the file)
// and what it downloads (compared with the server's BLAKE3 of the same version).

/** Bytes copied into the module at once. */
const PIECE = 1 << 20;
/** Bytes read from a file at once. */
const READ = 8 << 20;

/**
 * Bytes of a download's blocks: a power of two of 1 KiB chunks, so that each block is one
 * subtree of the file's BLAKE3 tree (crates/sluice-wasm/src/tree.rs), as the server asks.
 */
export const BLOCK = 4 << 20;

/**
 * @typedef {object} Exports
 * @property {WebAssembly.Memory} memory
 * @property {(len: number) => number} sluice_buffer
 * @property {() => number} sluice_hasher_new
 * @property {(id: number, len: number) => number} sluice_hasher_update
 * @property {(id: number) => number} sluice_hasher_finish
 * @property {(id: number) => void} sluice_hasher_drop
 * @property {(size: number, block: number) => number} sluice_tree_new
 * @property {(id: number, offset: number, len: number) => number} sluice_tree_add
 * @property {(id: number) => number} sluice_tree_hash
 * @property {(id: number) => void} sluice_tree_drop
 * @property {(now: number, early: number) => number} sluice_machine_receive
 * @property {(now: number, len: number) => number} sluice_machine_send
 * @property {(id: number, now: number, len: number) => number} sluice_machine_message
 * @property {(id: number, now: number, len: number) => number} sluice_machine_event
 * @property {(id: number) => number} sluice_machine_effect
 * @property {(id: number) => number} sluice_machine_deadline
 * @property {() => number} sluice_machine_error
 * @property {(id: number) => void} sluice_machine_end
 */

/** @type {Promise<Exports> | null} */
let loaded = null;

/** @returns {Promise<Exports>} the module, loaded once (a load that failed is tried again) */
export function module() {
  loaded ??= (async () => {
    const response = await fetch("/sluice.wasm");
    if (!response.ok) throw new Error(`/sluice.wasm: ${response.status}`);
    const { instance } = await WebAssembly.instantiate(await response.arrayBuffer(), {});
    return /** @type {Exports} */ (/** @type {unknown} */ (instance.exports));
  })().catch((e) => {
    loaded = null;
    throw e;
  });
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
    return hashOut(this.x);
  }

  /** Ends the hasher without a hash. */
  drop() {
    this.x.sluice_hasher_drop(this.id);
  }
}

/**
 * The 32 bytes at the start of the module's buffer (a hash it wrote there), as 64 hex digits.
 * @param {Exports} x
 */
function hashOut(x) {
  const out = new Uint8Array(x.memory.buffer, x.sluice_buffer(32), 32);
  return [...out].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * A download's BLAKE3, put together from its blocks' hashes so that every byte is hashed once,
 * as it arrives: a WebTransport block is checked against the server's hash of it (`cv`), bytes
 * over HTTPS are hashed block by block as they come, and what an earlier run kept is read back
 * from the partial file. The file's hash at the end comes from the blocks' hashes, without
 * reading the file again.
 */
export class Tree {
  /**
   * @param {Exports} x
   * @param {number} id
   * @param {number} size the file's bytes
   * @param {string} version the server's tag of the version the blocks are of
   */
  constructor(x, id, size, version) {
    this.x = x;
    this.id = id;
    this.size = size;
    this.version = version;
    this.block = BLOCK;
    /** @type {Set<number>} offsets of the blocks hashed */
    this.hashed = new Set();
  }

  /**
   * @param {number} size
   * @param {string} version
   */
  static async create(size, version) {
    const x = await module();
    const id = x.sluice_tree_new(size, BLOCK);
    if (!id) throw new Error("too many files are being downloaded at once");
    return new Tree(x, id, size, version);
  }

  /**
   * Hashes `bytes` as the block at `offset` (a multiple of `block`; the whole block).
   * @param {number} offset
   * @param {Uint8Array} bytes
   * @returns {string} the block's hash in the file's tree, 64 hex digits
   */
  add(offset, bytes) {
    const ptr = this.x.sluice_buffer(bytes.length);
    if (!ptr) throw new Error(`a block of ${bytes.length} bytes is too large to hash`);
    new Uint8Array(this.x.memory.buffer, ptr, bytes.length).set(bytes);
    if (!this.x.sluice_tree_add(this.id, offset, bytes.length)) {
      throw new Error(`the block at ${offset} (${bytes.length} bytes) is not one of the file's`);
    }
    this.hashed.add(offset);
    return hashOut(this.x);
  }

  /**
   * Where the next run of the download starts: `have` rounded down to a block's start (or the
   * file's end, all of it kept).
   * @param {number} have
   * @param {Blob} file the partial file
   */
  resumeAt(have, file) {
    const kept = Math.min(have, file.size);
    // All of it kept: its last block too, short as it may be.
    return kept === this.size ? kept : kept - (kept % this.block);
  }

  /**
   * Hashes every block before `from` that no run gave, read back from `file` (the partial
   * file). It runs while the rest of the download comes: the file is replaced when the rest's
   * writer closes, so that waits for this first.
   * @param {number} from
   * @param {Blob} file
   * @param {AbortSignal} [signal]
   * @returns {Promise<void>}
   */
  async hashKept(from, file, signal) {
    for (let at = 0; at < from; at += this.block) {
      if (signal?.aborted) throw new Error("cancelled");
      const end = Math.min(at + this.block, this.size);
      if (!this.hashed.has(at)) this.add(at, new Uint8Array(await file.slice(at, end).arrayBuffer()));
    }
  }

  /**
   * A writer of the file's bytes in order from `have`: each block hashed once it is full, and
   * the last one at the file's end; and the hashing of what the partial `file` holds before
   * `have` (its whole blocks as `hashKept` does; the rest of the block `have` is in is read
   * back into the writer first). Bytes beyond the size the tree was made for (the file grew on
   * the server) stop it: the tree then lacks blocks, and the download's check reads the file
   * again.
   * @param {number} have
   * @param {Blob} file
   * @param {AbortSignal} [signal]
   * @returns {Promise<{ feed: (bytes: Uint8Array) => void, kept: Promise<void> }>}
   */
  async feeder(have, file, signal) {
    let at = this.resumeAt(have, file);
    const block = new Uint8Array(this.block);
    let fill = 0;
    if (at < have) {
      block.set(new Uint8Array(await file.slice(at, have).arrayBuffer()));
      fill = have - at;
    }
    const kept = this.hashKept(at, file, signal);
    let beyond = false;
    /** @param {Uint8Array} bytes */
    const feed = (bytes) => {
      beyond ||= at + fill + bytes.length > this.size;
      for (let taken = 0; taken < bytes.length && !beyond;) {
        const n = Math.min(bytes.length - taken, block.length - fill);
        block.set(bytes.subarray(taken, taken + n), fill);
        fill += n;
        taken += n;
        if (fill === block.length || at + fill === this.size) {
          this.add(at, block.subarray(0, fill));
          at += fill;
          fill = 0;
        }
      }
    };
    return { feed, kept };
  }

  /** @returns {string | null} the file's BLAKE3 (64 hex digits), or null until every block is in */
  hex() {
    return this.x.sluice_tree_hash(this.id) ? hashOut(this.x) : null;
  }

  /** Ends the tree. */
  drop() {
    this.x.sluice_tree_drop(this.id);
  }
}

/**
 * The BLAKE3 of `bytes`, hex.
 * @param {Uint8Array} bytes
 */
export async function hashBytes(bytes) {
  const h = await Blake3.create();
  h.update(bytes);
  return h.hex();
}

/**
 * The BLAKE3 of each [`BLOCK`] of `blob` from its start, the first `count` of them (all when
 * `count` is null): what a resume offer or a repair compares.
 * @param {Blob} blob
 * @param {number | null} count
 * @param {AbortSignal} [signal]
 */
export async function blockHashes(blob, count, signal) {
  const n = Math.ceil(blob.size / BLOCK);
  const hashes = [];
  for (let k = 0; k < Math.min(n, count ?? n); k += 1) {
    if (signal?.aborted) throw new Error("cancelled");
    hashes.push(await hashBytes(new Uint8Array(await blob.slice(k * BLOCK, (k + 1) * BLOCK).arrayBuffer())));
  }
  return hashes;
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
