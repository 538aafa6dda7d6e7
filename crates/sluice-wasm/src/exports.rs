//! The module's exports (see the crate's doc): plain `extern "C"` functions over one
//! [`Module`]. A page runs them on one thread, so the lock is never contended.
#![allow(unsafe_code)] // `#[unsafe(no_mangle)]` only: exported names; no pointer is dereferenced.

use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::{Module, whole};

static STATE: Mutex<Module> = Mutex::new(Module {
    buffer: Vec::new(),
    open: Vec::new(),
    trees: Vec::new(),
    #[cfg(feature = "machines")]
    machines: crate::machines::Machines::new(),
});

fn state() -> MutexGuard<'static, Module> {
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

/// A new download's machine (`Receiving`) at `now_ms`, `early` (1) when the sender starts the
/// data right behind its manifest: its id; 0 when refused.
#[cfg(feature = "machines")]
#[unsafe(no_mangle)]
pub extern "C" fn sluice_machine_receive(now_ms: f64, early: u32) -> u32 {
    state().machines.receive(now_ms, early != 0)
}

/// A new upload's machine (`Sending`) at `now_ms` of the manifest in the buffer's first `len`
/// bytes (JSON): its id; 0 when refused (`sluice_machine_error` says why).
#[cfg(feature = "machines")]
#[unsafe(no_mangle)]
pub extern "C" fn sluice_machine_send(now_ms: f64, len: u32) -> u32 {
    state().machine_send(now_ms, len as usize)
}

/// Hands machine `id` the peer's frame in the buffer's first `len` bytes: 1, or 0 for an
/// unknown id.
#[cfg(feature = "machines")]
#[unsafe(no_mangle)]
pub extern "C" fn sluice_machine_message(id: u32, now_ms: f64, len: u32) -> u32 {
    u32::from(state().machine_input(id, now_ms, len as usize, false))
}

/// Hands machine `id` the driver's event (JSON) in the buffer's first `len` bytes: 1, or 0
/// when refused (`sluice_machine_error` says why).
#[cfg(feature = "machines")]
#[unsafe(no_mangle)]
pub extern "C" fn sluice_machine_event(id: u32, now_ms: f64, len: u32) -> u32 {
    u32::from(state().machine_input(id, now_ms, len as usize, true))
}

/// Machine `id`'s next effect at the buffer's start (a byte of kind, 1: frame, 2: JSON, then
/// its bytes): its length with that byte; 0: none; `u32::MAX`: over the buffer's limit.
#[cfg(feature = "machines")]
#[unsafe(no_mangle)]
pub extern "C" fn sluice_machine_effect(id: u32) -> u32 {
    state().machine_effect(id).map_or(u32::MAX, |len| len as u32)
}

/// When machine `id` wants its timeout event, in the page's milliseconds; -1: never.
#[cfg(feature = "machines")]
#[unsafe(no_mangle)]
pub extern "C" fn sluice_machine_deadline(id: u32) -> f64 {
    state().machines.deadline_ms(id).unwrap_or(-1.0)
}

/// The last refusal's reason (UTF-8) at the buffer's start: its length.
#[cfg(feature = "machines")]
#[unsafe(no_mangle)]
pub extern "C" fn sluice_machine_error() -> u32 {
    state().machine_error() as u32
}

/// Ends machine `id`.
#[cfg(feature = "machines")]
#[unsafe(no_mangle)]
pub extern "C" fn sluice_machine_end(id: u32) {
    state().machines.end(id);
}
