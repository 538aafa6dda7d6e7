//! BLAKE3 in the web app's page: Sluice's own hash (the `blake3` crate the CLI and server use),
//! compiled to WebAssembly (`wasm32-unknown-unknown`) by `crates/sluice-cli/build.rs` and served
//! by `sluice serve --web` at `/sluice.wasm`. The page hashes what it uploads and what it
//! downloads, and compares that with the server's BLAKE3 (`web/js/hash.js`).
//!
//! With the `machines` feature (on by default; `build.rs` leaves it out of the served module
//! until the page runs them), the module also carries `sluice-session`'s transfer machines
//! ([`machines`]; the `sluice_machine_*` exports below).
//!
//! The module's interface is a few plain functions (no wasm-bindgen), over [`Module`]:
//!
//! | export                          | does                                                       |
//! |---------------------------------|------------------------------------------------------------|
//! | `sluice_buffer(len) -> ptr`     | the module's input buffer, at least `len` bytes, at `ptr`  |
//! | `sluice_hasher_new() -> id`     | a new hasher (0: too many open)                            |
//! | `sluice_hasher_update(id, len)` | hashes the buffer's first `len` bytes into `id`; 0: refused |
//! | `sluice_hasher_finish(id)`      | writes the 32-byte hash to the buffer's start, ends `id`   |
//! | `sluice_hasher_drop(id)`        | ends `id` without a hash                                   |
//! | `sluice_tree_new(size, block) -> id` | a download's [`tree::Tree`] (0: refused)       |
//! | `sluice_tree_add(id, offset, len)` | hashes the buffer's first `len` bytes as the block at `offset`, keeps it, and writes its 32-byte [`tree::block_hash`] to the buffer's start; 0: refused |
//! | `sluice_tree_hash(id)`          | writes the file's BLAKE3 to the buffer's start once every block is in; 0: not yet |
//! | `sluice_tree_drop(id)`          | ends `id`                                                  |
//! | `sluice_machine_receive(now, early) -> id` | a download's transfer machine ([`machines`]; 0: refused) |
//! | `sluice_machine_send(now, len) -> id` | an upload's, of the manifest (JSON) in the buffer     |
//! | `sluice_machine_message(id, now, len)` | hands it the peer's frame in the buffer          |
//! | `sluice_machine_event(id, now, len)` | hands it the driver's event (JSON) in the buffer; 0: refused |
//! | `sluice_machine_effect(id) -> len` | its next effect at the buffer's start (kind byte 1: frame, 2: JSON); 0: none |
//! | `sluice_machine_deadline(id) -> ms` | when it wants `"timeout"`; -1: never                |
//! | `sluice_machine_error() -> len` | the last refusal's reason at the buffer's start          |
//! | `sluice_machine_end(id)`        | ends `id`                                                  |
//!
//! The page copies each piece of a file into the buffer, then calls update: one piece at a time,
//! so several files can be hashed at once through the one buffer. The buffer may move when it
//! grows (`sluice_buffer` with a larger `len`), and the memory's `ArrayBuffer` is replaced when
//! the memory grows: the page takes both again after each `sluice_buffer`. Sizes and offsets
//! pass as JavaScript numbers (`f64`), whole and below 2^53.

#[cfg(feature = "machines")]
pub mod machines;
pub mod tree;

#[cfg(feature = "machines")]
use machines::{Machines, Output};
use tree::Tree;

/// Hashers open at once (each a `blake3::Hasher`, about 2 KiB).
pub const HASHERS_MAX: usize = 64;
/// Download trees open at once.
pub const TREES_MAX: usize = 64;
/// The largest input buffer.
pub const BUFFER_MAX: usize = 16 << 20;

/// The module's state: its input buffer, and its open hashers, trees and transfer machines, by
/// id (from 1).
#[derive(Debug, Default)]
pub struct Module {
    buffer: Vec<u8>,
    open: Vec<Option<blake3::Hasher>>,
    trees: Vec<Option<Tree>>,
    /// The transfer machines ([`machines`]).
    #[cfg(feature = "machines")]
    pub machines: Machines,
}

/// The first free slot of `slots` (a new one up to `max`) holding `value`: its id, from 1; 0
/// when all `max` are taken.
fn seat<T>(slots: &mut Vec<Option<T>>, max: usize, value: T) -> u32 {
    if let Some(free) = slots.iter().position(Option::is_none) {
        slots[free] = Some(value);
        return free as u32 + 1;
    }
    if slots.len() >= max {
        return 0;
    }
    slots.push(Some(value));
    slots.len() as u32
}

/// Slot `id` (from 1) of `slots`, if taken.
fn slot<T>(slots: &mut [Option<T>], id: u32) -> Option<&mut T> {
    let index = (id as usize).checked_sub(1)?;
    slots.get_mut(index)?.as_mut()
}

/// Frees slot `id` of `slots` (nothing for an unknown one).
fn free<T>(slots: &mut [Option<T>], id: u32) {
    if let Some(taken) = (id as usize).checked_sub(1).and_then(|i| slots.get_mut(i)) {
        *taken = None;
    }
}

/// A whole number below 2^53 from JavaScript, as `u64`.
pub fn whole(x: f64) -> Option<u64> {
    (x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x < 9_007_199_254_740_992.0)
        .then_some(x as u64)
}

impl Module {
    /// The input buffer, grown to at least `len` bytes (at most [`BUFFER_MAX`]; `None` beyond).
    pub fn buffer(&mut self, len: usize) -> Option<&mut [u8]> {
        if len > BUFFER_MAX {
            return None;
        }
        if self.buffer.len() < len.max(32) {
            self.buffer.resize(len.max(32), 0);
        }
        Some(&mut self.buffer)
    }

    /// A new hasher's id, or 0 when [`HASHERS_MAX`] are open.
    pub fn start(&mut self) -> u32 {
        seat(&mut self.open, HASHERS_MAX, blake3::Hasher::new())
    }

    /// A new download tree's id ([`Tree::new`]), or 0 when refused or [`TREES_MAX`] are open.
    pub fn tree_start(&mut self, size: u64, block: u64) -> u32 {
        match Tree::new(size, block) {
            Some(tree) => seat(&mut self.trees, TREES_MAX, tree),
            None => 0,
        }
    }

    /// Hashes the buffer's first `len` bytes as the block at `offset` of tree `id`
    /// ([`Tree::add`]) and writes its hash to the buffer's first 32 bytes; false when refused.
    pub fn tree_add(&mut self, id: u32, offset: u64, len: usize) -> bool {
        let (Some(input), Some(tree)) = (self.buffer.get(..len), slot(&mut self.trees, id)) else {
            return false;
        };
        let Some(hash) = tree.add(offset, input) else {
            return false;
        };
        self.put_hash(&hash);
        true
    }

    /// Writes tree `id`'s file hash to the buffer's first 32 bytes; false until every block is
    /// in, or for an unknown id.
    pub fn tree_hash(&mut self, id: u32) -> bool {
        let Some(hash) = slot(&mut self.trees, id).and_then(|t| t.file_hash()) else {
            return false;
        };
        self.put_hash(&hash);
        true
    }

    /// Ends tree `id` (nothing for an unknown one).
    pub fn tree_end(&mut self, id: u32) {
        free(&mut self.trees, id);
    }

    fn put_hash(&mut self, hash: &[u8; 32]) {
        self.buffer.resize(self.buffer.len().max(32), 0);
        self.buffer[..32].copy_from_slice(hash);
    }

    /// Hashes the buffer's first `len` bytes into hasher `id`; false for an unknown id or a
    /// `len` beyond the buffer.
    pub fn update(&mut self, id: u32, len: usize) -> bool {
        let (Some(input), Some(hasher)) = (self.buffer.get(..len), slot(&mut self.open, id)) else {
            return false;
        };
        hasher.update(input);
        true
    }

    /// Ends hasher `id` and writes its hash to the buffer's first 32 bytes; false for an
    /// unknown id.
    pub fn finish(&mut self, id: u32) -> bool {
        let Some(hash) = slot(&mut self.open, id).map(|h| h.finalize()) else {
            return false;
        };
        self.end(id);
        self.put_hash(hash.as_bytes());
        true
    }

    /// Ends hasher `id` (nothing for an unknown one).
    pub fn end(&mut self, id: u32) {
        free(&mut self.open, id);
    }

    /// The buffer's first `len` bytes (the hash after [`Module::finish`]).
    pub fn output(&self, len: usize) -> &[u8] {
        &self.buffer[..len.min(self.buffer.len())]
    }
}

/// The transfer machines' side of the module's buffer.
#[cfg(feature = "machines")]
impl Module {
    /// A [`machines::Machines::send`] of the manifest in the buffer's first `len` bytes.
    pub fn machine_send(&mut self, now_ms: f64, len: usize) -> u32 {
        match self.buffer.get(..len) {
            Some(manifest) => self.machines.send(now_ms, manifest),
            None => 0,
        }
    }

    /// Hands machine `id` the frame (`event`: false) or the event (true) in the buffer's first
    /// `len` bytes; false when refused.
    pub fn machine_input(&mut self, id: u32, now_ms: f64, len: usize, event: bool) -> bool {
        let Some(input) = self.buffer.get(..len) else { return false };
        match event {
            false => self.machines.message(id, now_ms, input),
            true => self.machines.event(id, now_ms, input),
        }
    }

    /// Writes machine `id`'s next effect to the buffer's start: a byte of kind (1: a frame
    /// for the control stream, 2: JSON), then the bytes. Its length with that byte; 0 when
    /// the machine asks for nothing; `None` for an effect over [`BUFFER_MAX`] (the machine
    /// is left as it is, its effect lost: the page must end the transfer).
    pub fn machine_effect(&mut self, id: u32) -> Option<usize> {
        let (kind, bytes) = match self.machines.effect(id) {
            None => return Some(0),
            Some(Output::Frame(frame)) => (1, frame),
            Some(Output::Json(value)) => (2, value.to_string().into_bytes()),
        };
        let buffer = self.buffer(1 + bytes.len())?;
        buffer[0] = kind;
        buffer[1..1 + bytes.len()].copy_from_slice(&bytes);
        Some(1 + bytes.len())
    }

    /// Writes the last refusal's reason to the buffer's start: its length.
    pub fn machine_error(&mut self) -> usize {
        let why = self.machines.error().as_bytes().to_vec();
        match self.buffer(why.len()) {
            Some(buffer) => {
                buffer[..why.len()].copy_from_slice(&why);
                why.len()
            }
            None => 0,
        }
    }
}

#[cfg(target_arch = "wasm32")]
pub mod exports;

#[cfg(all(test, feature = "machines"))]
mod machines_tests;
#[cfg(test)]
mod tests;
