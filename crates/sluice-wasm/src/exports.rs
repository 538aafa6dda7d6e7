//! The module's exports (see the crate's doc): plain `extern "C"` functions over one
//! [`Hashers`]. A page runs them on one thread, so the lock is never contended.
#![allow(unsafe_code)] // `#[unsafe(no_mangle)]` only: exported names; no pointer is dereferenced.

use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::{Hashers, whole};

static STATE: Mutex<Hashers> =
    Mutex::new(Hashers { buffer: Vec::new(), open: Vec::new(), trees: Vec::new() });

fn state() -> MutexGuard<'static, Hashers> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The input buffer's address, at least `len` bytes long; 0 when `len` is too large.
#[unsafe(no_mangle)]
pub extern "C" fn sluice_buffer(len: u32) -> u32 {
    state().buffer(len as usize).map_or(0, |b| b.as_mut_ptr() as usize as u32)
}

/// A new hasher's id; 0 when too many are open.
#[unsafe(no_mangle)]
pub extern "C" fn sluice_hasher_new() -> u32 {
    state().start()
}

/// Hashes the buffer's first `len` bytes into hasher `id`: 1, or 0 when refused.
#[unsafe(no_mangle)]
pub extern "C" fn sluice_hasher_update(id: u32, len: u32) -> u32 {
    u32::from(state().update(id, len as usize))
}

/// Ends hasher `id`, its hash in the buffer's first 32 bytes: 1, or 0 for an unknown id.
#[unsafe(no_mangle)]
pub extern "C" fn sluice_hasher_finish(id: u32) -> u32 {
    u32::from(state().finish(id))
}

/// Ends hasher `id` without a hash.
#[unsafe(no_mangle)]
pub extern "C" fn sluice_hasher_drop(id: u32) {
    state().end(id);
}

/// A new download tree of a file of `size` bytes in blocks of `block` bytes; 0 when refused.
#[unsafe(no_mangle)]
pub extern "C" fn sluice_tree_new(size: f64, block: f64) -> u32 {
    match (whole(size), whole(block)) {
        (Some(size), Some(block)) => state().tree_start(size, block),
        _ => 0,
    }
}

/// Hashes the buffer's first `len` bytes as the block at `offset` of tree `id`, its hash in the
/// buffer's first 32 bytes: 1, or 0 when refused.
#[unsafe(no_mangle)]
pub extern "C" fn sluice_tree_add(id: u32, offset: f64, len: u32) -> u32 {
    whole(offset).map_or(0, |offset| u32::from(state().tree_add(id, offset, len as usize)))
}

/// The file's BLAKE3 of tree `id` in the buffer's first 32 bytes: 1, or 0 until every block is
/// in.
#[unsafe(no_mangle)]
pub extern "C" fn sluice_tree_hash(id: u32) -> u32 {
    u32::from(state().tree_hash(id))
}

/// Ends tree `id`.
#[unsafe(no_mangle)]
pub extern "C" fn sluice_tree_drop(id: u32) {
    state().tree_end(id);
}
