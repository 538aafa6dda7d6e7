//! The sending side's chunk plan, shared by the channels of one transfer.
//!
//! The byte ranges to send are cut into chunks of [`CHUNK_BYTES`]. A channel takes the next
//! chunk when its own queue runs low (first come, first served, so a slow channel simply takes
//! fewer); chunks are acknowledged in the order a channel took them, so a channel knows exactly
//! which of its chunks are done from its cumulative acknowledged byte count. A channel that
//! dies hands the unacknowledged rest of its chunks back, and the others take them.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes per chunk: small enough that the last chunks spread over all channels and a dead
/// channel's share is small, large enough that taking one is rare (one per 4 MiB).
pub const CHUNK_BYTES: u64 = 4 << 20;

/// The transfer's chunks not yet taken, and its unacknowledged byte count.
#[derive(Debug)]
pub(super) struct Plan {
    pending: Mutex<VecDeque<Range<u64>>>,
    /// Bytes of the range no channel has had acknowledged yet.
    unacked: AtomicU64,
    total: u64,
}

impl Plan {
    /// The chunks of `ranges` (in order; each cut into chunks of at most `chunk_bytes`).
    pub(super) fn new(ranges: &[Range<u64>], chunk_bytes: u64) -> Self {
        let chunk = chunk_bytes.max(1);
        let mut pending = VecDeque::new();
        let mut total = 0;
        for range in ranges {
            let mut at = range.start;
            while at < range.end {
                let end = range.end.min(at.saturating_add(chunk));
                pending.push_back(at..end);
                total += end - at;
                at = end;
            }
        }
        Self { pending: Mutex::new(pending), unacked: AtomicU64::new(total), total }
    }

    /// Takes the next chunk, if any is left.
    pub(super) fn take(&self) -> Option<Range<u64>> {
        self.lock().pop_front()
    }

    /// Hands chunks back (a dead channel's unacknowledged rest): they go first.
    pub(super) fn give_back(&self, chunks: impl IntoIterator<Item = Range<u64>>) {
        let mut pending = self.lock();
        for chunk in chunks.into_iter().filter(|c| c.end > c.start) {
            pending.push_front(chunk);
        }
    }

    /// Counts `bytes` as acknowledged.
    pub(super) fn acked(&self, bytes: u64) {
        self.unacked.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Whether every byte of the range is acknowledged.
    pub(super) fn done(&self) -> bool {
        self.unacked.load(Ordering::Acquire) == 0
    }

    /// Bytes acknowledged so far.
    pub(super) fn acked_bytes(&self) -> u64 {
        self.total - self.unacked.load(Ordering::Acquire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Range<u64>>> {
        // A channel thread that panicked while holding the lock left a consistent queue (every
        // operation is a single push or pop).
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One channel's share of the plan: the chunks it took, in order, and how much of them its
/// sender has had acknowledged.
#[derive(Debug, Default)]
pub(super) struct Taken {
    chunks: VecDeque<Range<u64>>,
    /// Acknowledged bytes of the sender already credited to the plan.
    credited: u64,
    /// Bytes of `chunks` before the first one not fully acknowledged (relative to `credited`).
    front_done: u64,
}

impl Taken {
    pub(super) fn push(&mut self, chunk: Range<u64>) {
        self.chunks.push_back(chunk);
    }

    /// Takes the sender's cumulative acknowledged bytes; credits the plan with what is new.
    pub(super) fn credit(&mut self, sender_acked: u64, plan: &Plan) {
        let new = sender_acked.saturating_sub(self.credited);
        if new == 0 {
            return;
        }
        self.credited = sender_acked;
        plan.acked(new);
        self.front_done += new;
        while let Some(front) = self.chunks.front() {
            let len = front.end - front.start;
            if self.front_done < len {
                break;
            }
            self.front_done -= len;
            self.chunks.pop_front();
        }
    }

    /// The unacknowledged rest of the chunks taken, to hand back when the channel dies.
    pub(super) fn unacked(&self) -> Vec<Range<u64>> {
        let mut rest: Vec<Range<u64>> = self.chunks.iter().cloned().collect();
        if let Some(first) = rest.first_mut() {
            first.start += self.front_done;
        }
        rest
    }

    /// Whether every chunk taken is acknowledged.
    pub(super) fn all_acked(&self) -> bool {
        self.chunks.is_empty()
    }
}
