//! The receiving side's file: every channel writes through one [`SharedFile`], which puts each
//! byte of the range on disk once, records what is there, and lets one thread hash the
//! contiguous prefix already written while the rest still arrives
//! ([`SharedFile::hash_written`]).
//!
//! Each byte is written once: a chunk handed from a dead channel to another may arrive twice, and
//! its second copy is dropped wherever the first is already on disk. The copies hold the same
//! bytes unless the sender's file changed in between; either way nothing the hasher has read is
//! overwritten, so its hash is the hash of what the file holds at the end.

use std::io;
use std::ops::Range;
use std::sync::atomic::AtomicBool;
use std::sync::{Condvar, Mutex, MutexGuard};

use sluice_proto::intervals::IntervalSet;

use super::store::{Store, write_all_at};
use crate::files::{FileHasher, HASH_BLOCK_BYTES};

/// The file every receiving channel writes into, one write at a time. Writes into one file from
/// several threads contend for its inode lock, on which the kernel spins: on the LAN path two
/// receiving channels spent a fifth of their CPU time spinning there (`rwsem_spin_on_owner`)
/// and moved 2.0 Gbit/s where one channel moved 3.5. This lock sleeps.
pub(super) struct SharedFile<'f> {
    store: &'f dyn Store,
    range: Range<u64>,
    /// What is on disk. Holding the lock is a writer's turn.
    written: Mutex<Written>,
    /// Signalled when the written prefix grows and when the transfer ends.
    changed: Condvar,
}

/// What [`SharedFile`] keeps under its lock.
struct Written {
    /// Bytes of the range on disk, as inclusive ranges.
    bytes: IntervalSet,
    /// End of the contiguous run on disk from the range's start (the hasher's limit).
    prefix_end: u64,
    /// Set once no channel writes any more: whether the whole range arrived.
    ended: Option<bool>,
}

impl<'f> SharedFile<'f> {
    /// A store about to receive `range`, of which `present` is on disk already.
    pub(super) fn new(store: &'f dyn Store, range: Range<u64>, present: &IntervalSet) -> Self {
        let bytes = present.clone();
        let prefix_end = match range.end > range.start {
            true => bytes.gaps(range.start, range.end - 1).next().map_or(range.end, |(lo, _)| lo),
            false => range.start,
        };
        let written = Written { bytes, prefix_end, ended: None };
        Self { store, range, written: Mutex::new(written), changed: Condvar::new() }
    }

    /// The end of the run on disk from the range's start.
    pub(super) fn prefix(&self) -> u64 {
        self.lock().prefix_end
    }

    fn lock(&self) -> MutexGuard<'_, Written> {
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the parts of `data` (the bytes at `offset`) that are not on disk yet, and records
    /// them; wakes the hasher when the written prefix grew.
    pub(super) fn write_all_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        let Some(len_less_one) = (data.len() as u64).checked_sub(1) else { return Ok(()) };
        let last = offset.checked_add(len_less_one).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "a write past the largest file offset")
        })?;
        let mut written = self.lock();
        for (lo, hi) in written.bytes.gaps(offset, last) {
            let (from, to) = ((lo - offset) as usize, (hi - offset) as usize + 1);
            write_all_at(self.store, &data[from..to], lo)?;
        }
        written.bytes.insert(offset, last);
        let before = written.prefix_end;
        if offset <= before && before < self.range.end {
            let next_gap = written.bytes.gaps(before, self.range.end - 1).next();
            written.prefix_end = next_gap.map_or(self.range.end, |(lo, _)| lo);
            if written.prefix_end > before {
                self.changed.notify_all();
            }
        }
        Ok(())
    }

    /// Says that no channel writes any more, and whether the whole range arrived. The first
    /// call counts.
    pub(super) fn finish(&self, complete: bool) {
        let mut written = self.lock();
        written.ended.get_or_insert(complete);
        self.changed.notify_all();
    }

    /// BLAKE3 of each extent of the range (the first from the range's start to `ends[0]`, the
    /// next to `ends[1]`, ...), read back from the store as it is written: reads the contiguous
    /// prefix on disk in blocks of [`HASH_BLOCK_BYTES`] (a block once it is all there) and
    /// sleeps until it grows. Returns `None` when the transfer ended incomplete
    /// ([`SharedFile::finish`] with `false`) or `cancel` was set.
    pub(super) fn hash_written(
        &self,
        ends: Vec<u64>,
        cancel: &AtomicBool,
    ) -> io::Result<Option<Vec<blake3::Hash>>> {
        let mut hashing = FileHasher::new(self.range.start, ends);
        while hashing.offset() < self.range.end {
            let offset = hashing.offset();
            let ready = {
                let mut written = self.lock();
                loop {
                    let want = (self.range.end - offset).min(HASH_BLOCK_BYTES as u64);
                    match written.ended {
                        Some(false) => return Ok(None),
                        Some(true) if written.prefix_end <= offset => {
                            return Err(io::Error::other(format!(
                                "the transfer completed but byte {offset} was never written"
                            )));
                        }
                        Some(true) => break written.prefix_end,
                        None if written.prefix_end >= offset + want => break written.prefix_end,
                        None => {
                            written = self.changed.wait(written).unwrap_or_else(|e| e.into_inner())
                        }
                    }
                }
            };
            if !hashing.read_to(self.store, ready, cancel)? {
                return Ok(None);
            }
        }
        Ok(Some(hashing.finish()))
    }
}
