//! The sending side's chunk plan, shared by the channels of one transfer.
//!
//! The byte ranges to send (adjacent ones joined) are cut into chunks where the offset space
//! crosses a multiple of [`CHUNK_BYTES`]. A channel takes the next chunk when its own queue runs
//! low (first come, first served, so a slow channel simply takes fewer) and pushes it to its
//! sender whole, or piece by piece as compressed frames ([`super::compress`]). What it pushed
//! is acknowledged in order, so a channel knows exactly which of it is done from its sender's
//! cumulative acknowledged byte count. A channel that dies hands the unacknowledged rest back,
//! and the others take it.

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
    /// The ranges to send, adjacent ones joined: the parts a receiver awaits, from which both
    /// ends cut the same compression pieces ([`super::compress::piece_at`]).
    parts: Vec<Range<u64>>,
    /// Bytes of the range no channel has had acknowledged yet.
    unacked: AtomicU64,
    total: u64,
}

impl Plan {
    /// The chunks of `ranges` (in order): adjacent ranges are joined, then cut where the
    /// offset space crosses a multiple of `chunk_bytes`.
    pub(super) fn new(ranges: &[Range<u64>], chunk_bytes: u64) -> Self {
        let chunk = chunk_bytes.max(1);
        let mut parts: Vec<Range<u64>> = Vec::new();
        for range in ranges.iter().filter(|r| r.start < r.end) {
            match parts.last_mut() {
                Some(last) if last.end == range.start => last.end = range.end,
                _ => parts.push(range.clone()),
            }
        }
        let mut pending = VecDeque::new();
        let mut total = 0;
        for part in &parts {
            let mut at = part.start;
            while at < part.end {
                let end = part.end.min((at / chunk).saturating_add(1).saturating_mul(chunk));
                pending.push_back(at..end);
                total += end - at;
                at = end;
            }
        }
        Self { pending: Mutex::new(pending), parts, unacked: AtomicU64::new(total), total }
    }

    /// Takes the next chunk, if any is left.
    pub(super) fn take(&self) -> Option<Range<u64>> {
        self.lock().pop_front()
    }

    /// Hands chunks back (a dead channel's unacknowledged rest): they go first.
    pub(super) fn give_back(&self, chunks: impl IntoIterator<Item = Range<u64>>) {
        let mut pending = self.lock();
        let chunks: Vec<_> = chunks.into_iter().filter(|c| c.end > c.start).collect();
        for chunk in chunks.into_iter().rev() {
            pending.push_front(chunk);
        }
    }

    /// Whether `piece` is a whole compression piece as the receiver cuts them (a piece handed
    /// back partly acknowledged is not, and must go raw).
    pub(super) fn whole_piece(&self, piece: &Range<u64>) -> bool {
        super::compress::piece_at(&self.parts, piece.start).as_ref() == Some(piece)
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

/// What a channel pushed to its sender: the bytes of `range`, as they are (`wire` equals the
/// range's length) or as a compressed frame of `wire` bytes.
#[derive(Debug, Clone)]
struct Item {
    range: Range<u64>,
    wire: u64,
    frame: bool,
}

/// One channel's share of the plan: what it took, in order, and how much of it its sender has
/// had acknowledged.
#[derive(Debug, Default)]
pub(super) struct Taken {
    /// Pushed to the sender, in order.
    items: VecDeque<Item>,
    /// Taken from the plan and not pushed yet.
    unpushed: VecDeque<Range<u64>>,
    /// The sender's acknowledged (wire) bytes already counted.
    credited: u64,
    /// Wire bytes of the front item acknowledged.
    front_done: u64,
}

impl Taken {
    /// Holds `chunk` (taken from the plan) until it is pushed.
    pub(super) fn take(&mut self, chunk: Range<u64>) {
        self.unpushed.push_back(chunk);
    }

    /// The next bytes to push: the start of what was taken first, up to where the offset space
    /// crosses a multiple of `grid`.
    pub(super) fn next(&mut self, grid: u64) -> Option<Range<u64>> {
        let front = self.unpushed.front_mut()?;
        let grid = grid.max(1);
        let end = front.end.min((front.start / grid).saturating_add(1).saturating_mul(grid));
        let next = front.start..end;
        front.start = end;
        if front.start >= front.end {
            self.unpushed.pop_front();
        }
        Some(next)
    }

    /// Records what was pushed for `range`: its bytes as they are, or a frame of `wire`.
    pub(super) fn pushed(&mut self, range: Range<u64>, frame: Option<u64>) {
        let wire = frame.unwrap_or(range.end - range.start);
        self.items.push_back(Item { range, wire, frame: frame.is_some() });
    }

    /// Takes the sender's cumulative acknowledged (wire) bytes; credits the plan with the
    /// bytes of the range they complete (raw bytes as they are acknowledged, a frame's piece
    /// when all of the frame is), and calls `frame_done` with the start of each frame done.
    pub(super) fn credit(
        &mut self,
        sender_acked: u64,
        plan: &Plan,
        frame_done: &mut dyn FnMut(u64),
    ) {
        let mut new = sender_acked.saturating_sub(self.credited);
        self.credited = self.credited.max(sender_acked);
        while new > 0 {
            let Some(front) = self.items.front() else { break };
            let step = new.min(front.wire - self.front_done);
            self.front_done += step;
            new -= step;
            if !front.frame {
                plan.acked(step);
            }
            if self.front_done < front.wire {
                break;
            }
            if front.frame {
                plan.acked(front.range.end - front.range.start);
                frame_done(front.range.start);
            }
            self.front_done = 0;
            self.items.pop_front();
        }
    }

    /// What is not acknowledged, to hand back when the channel dies: the rest of a raw item,
    /// all of a frame's piece (its receiver's half-gathered frame dies with the channel), and
    /// everything not pushed.
    pub(super) fn unacked(&self) -> Vec<Range<u64>> {
        let mut rest: Vec<Range<u64>> = self.items.iter().map(|i| i.range.clone()).collect();
        if let (Some(first), Some(item)) = (rest.first_mut(), self.items.front())
            && !item.frame
        {
            first.start += self.front_done;
        }
        rest.extend(self.unpushed.iter().cloned());
        rest
    }

    /// Whether everything taken is acknowledged.
    pub(super) fn all_acked(&self) -> bool {
        self.items.is_empty() && self.unpushed.is_empty()
    }
}
