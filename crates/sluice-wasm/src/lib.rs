//! BLAKE3 in the web app's page: Sluice's own hash (the `blake3` crate the CLI and server use),
//! compiled to WebAssembly (`wasm32-unknown-unknown`) by `crates/sluice-cli/build.rs` and served
//! by `sluice serve --web` at `/sluice.wasm`. The page hashes what it uploads and what it
//! downloads, and compares that with the server's BLAKE3 (`web/js/hash.js`).
//!
//! The module's interface is a few plain functions (no wasm-bindgen), over [`Hashers`]:
//!
//! | export                          | does                                                       |
//! |---------------------------------|------------------------------------------------------------|
//! | `sluice_buffer(len) -> ptr`     | the module's input buffer, at least `len` bytes, at `ptr`  |
//! | `sluice_hasher_new() -> id`     | a new hasher (0: too many open)                            |
//! | `sluice_hasher_update(id, len)` | hashes the buffer's first `len` bytes into `id`; 0: refused |
//! | `sluice_hasher_finish(id)`      | writes the 32-byte hash to the buffer's start, ends `id`   |
//! | `sluice_hasher_drop(id)`        | ends `id` without a hash                                   |
//!
//! The page copies each piece of a file into the buffer, then calls update: one piece at a time,
//! so several files can be hashed at once through the one buffer. The buffer may move when it
//! grows (`sluice_buffer` with a larger `len`), and the memory's `ArrayBuffer` is replaced when
//! the memory grows: the page takes both again after each `sluice_buffer`.

/// Hashers open at once (each a `blake3::Hasher`, about 2 KiB).
pub const HASHERS_MAX: usize = 64;
/// The largest input buffer.
pub const BUFFER_MAX: usize = 16 << 20;

/// The module's state: its input buffer and its open hashers, by id (from 1).
#[derive(Debug, Default)]
pub struct Hashers {
    buffer: Vec<u8>,
    open: Vec<Option<blake3::Hasher>>,
}

impl Hashers {
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
        if let Some(free) = self.open.iter().position(Option::is_none) {
            self.open[free] = Some(blake3::Hasher::new());
            return free as u32 + 1;
        }
        if self.open.len() >= HASHERS_MAX {
            return 0;
        }
        self.open.push(Some(blake3::Hasher::new()));
        self.open.len() as u32
    }

    fn hasher(open: &mut [Option<blake3::Hasher>], id: u32) -> Option<&mut blake3::Hasher> {
        let index = (id as usize).checked_sub(1)?;
        open.get_mut(index)?.as_mut()
    }

    /// Hashes the buffer's first `len` bytes into hasher `id`; false for an unknown id or a
    /// `len` beyond the buffer.
    pub fn update(&mut self, id: u32, len: usize) -> bool {
        let (Some(input), Some(hasher)) =
            (self.buffer.get(..len), Self::hasher(&mut self.open, id))
        else {
            return false;
        };
        hasher.update(input);
        true
    }

    /// Ends hasher `id` and writes its hash to the buffer's first 32 bytes; false for an
    /// unknown id.
    pub fn finish(&mut self, id: u32) -> bool {
        let Some(hash) = Self::hasher(&mut self.open, id).map(|h| h.finalize()) else {
            return false;
        };
        self.end(id);
        self.buffer.resize(self.buffer.len().max(32), 0);
        self.buffer[..32].copy_from_slice(hash.as_bytes());
        true
    }

    /// Ends hasher `id` (nothing for an unknown one).
    pub fn end(&mut self, id: u32) {
        if let Some(slot) = (id as usize).checked_sub(1).and_then(|i| self.open.get_mut(i)) {
            *slot = None;
        }
    }

    /// The buffer's first `len` bytes (the hash after [`Hashers::finish`]).
    pub fn output(&self, len: usize) -> &[u8] {
        &self.buffer[..len.min(self.buffer.len())]
    }
}

#[cfg(target_arch = "wasm32")]
mod exports;

#[cfg(test)]
mod tests;
