//! The sending side's chunk plan, shared by the data channels of one transfer; pure logic,
//! used by the real data path (`sluice::datapath`) and by the simulator (`sluice-netsim`), so
//! the plan the simulator tests is the one that moves real files.
//!
//! The byte ranges to send (adjacent ones joined) are cut into chunks where the offset space
//! crosses a multiple of [`CHUNK_BYTES`]. A channel takes the next chunk when its own queue runs
//! low (first come, first served, so a slow channel simply takes fewer) and pushes it to its
//! sender whole, or piece by piece ([`piece_at`]: cells of [`COMPRESS_BLOCK_BYTES`]) as
//! compressed frames. What it pushed is acknowledged in order, so a channel knows exactly which
//! of it is done from its sender's cumulative acknowledged byte count ([`Taken`]). A channel
//! that dies hands the unacknowledged rest back ([`Taken::unacked`], [`Plan::give_back`]), and
//! the others take it.
//!
//! The plan is shared between channel threads (a lock and an atomic), so every method takes
//! `&self`; a single-threaded driver pays an uncontended lock.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The grid of pieces compressed on their own: a piece is a cell of this grid, or the part of
/// one that a part of the range holds.
pub const COMPRESS_BLOCK_BYTES: u64 = 256 << 10;

/// Bytes per chunk: small enough that the last chunks spread over all channels and a dead
/// channel's share is small, large enough that taking one is rare (one per 4 MiB).
pub const CHUNK_BYTES: u64 = 4 << 20;

/// The transfer's chunks not yet taken, and its unacknowledged byte count.
#[derive(Debug)]
pub struct Plan {
    pending: Mutex<VecDeque<Range<u64>>>,
    /// The ranges to send, adjacent ones joined: the parts a receiver awaits, from which both
    /// ends cut the same compression pieces ([`piece_at`]).
    parts: Vec<Range<u64>>,
    /// Bytes of the range no channel has had acknowledged yet.
    unacked: AtomicU64,
    /// Bytes of the chunks not taken.
    untaken: AtomicU64,
    total: u64,
}

impl Plan {
    /// The chunks of `ranges` (in order): adjacent ranges are joined, then cut where the
    /// offset space crosses a multiple of `chunk_bytes`.
    pub fn new(ranges: &[Range<u64>], chunk_bytes: u64) -> Self {
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
        Self {
            pending: Mutex::new(pending),
            parts,
            unacked: AtomicU64::new(total),
            untaken: AtomicU64::new(total),
            total,
        }
    }

    /// Takes the next chunk, if any is left.
    pub fn take(&self) -> Option<Range<u64>> {
        let chunk = self.lock().pop_front()?;
        self.untaken.fetch_sub(chunk.end - chunk.start, Ordering::AcqRel);
        Some(chunk)
    }

    /// Hands chunks back (a dead channel's unacknowledged rest): they go first.
    pub fn give_back(&self, chunks: impl IntoIterator<Item = Range<u64>>) {
        let mut pending = self.lock();
        let chunks: Vec<_> = chunks.into_iter().filter(|c| c.end > c.start).collect();
        for chunk in chunks.into_iter().rev() {
            self.untaken.fetch_add(chunk.end - chunk.start, Ordering::AcqRel);
            pending.push_front(chunk);
        }
    }

    /// Whether `piece` is a whole compression piece as the receiver cuts them (a piece handed
    /// back partly acknowledged is not, and must go raw).
    pub fn whole_piece(&self, piece: &Range<u64>) -> bool {
        piece_at(&self.parts, piece.start).as_ref() == Some(piece)
    }

    /// Counts `bytes` as acknowledged.
    pub fn acked(&self, bytes: u64) {
        self.unacked.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Whether every byte of the range is acknowledged.
    pub fn done(&self) -> bool {
        self.unacked.load(Ordering::Acquire) == 0
    }

    /// Bytes of the chunks no channel has taken (those handed back included).
    pub fn untaken_bytes(&self) -> u64 {
        self.untaken.load(Ordering::Acquire)
    }

    /// Bytes acknowledged so far.
    pub fn acked_bytes(&self) -> u64 {
        self.total - self.unacked.load(Ordering::Acquire)
    }

    /// Bytes of the whole range.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The ranges to send, adjacent ones joined.
    pub fn parts(&self) -> &[Range<u64>] {
        &self.parts
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Range<u64>>> {
        // A channel thread that panicked while holding the lock left a consistent queue (every
        // operation is a single push or pop).
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The piece of the byte space that holds `at`, given `missing`: the parts of the range that
/// move (increasing, not adjacent, as the receiver knows them and the sender cut them).
pub fn piece_at(missing: &[Range<u64>], at: u64) -> Option<Range<u64>> {
    let i = missing.partition_point(|r| r.end <= at);
    let part = missing.get(i).filter(|r| r.start <= at)?;
    let cell = at - at % COMPRESS_BLOCK_BYTES;
    Some(part.start.max(cell)..part.end.min(cell + COMPRESS_BLOCK_BYTES))
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
pub struct Taken {
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
    pub fn take(&mut self, chunk: Range<u64>) {
        self.unpushed.push_back(chunk);
    }

    /// The next bytes to push: the start of what was taken first, up to where the offset space
    /// crosses a multiple of `grid`.
    pub fn next(&mut self, grid: u64) -> Option<Range<u64>> {
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
    pub fn pushed(&mut self, range: Range<u64>, frame: Option<u64>) {
        let wire = frame.unwrap_or(range.end - range.start);
        self.items.push_back(Item { range, wire, frame: frame.is_some() });
    }

    /// Takes the sender's cumulative acknowledged (wire) bytes; credits the plan with the
    /// bytes of the range they complete (raw bytes as they are acknowledged, a frame's piece
    /// when all of the frame is), and calls `frame_done` with the start of each frame done.
    pub fn credit(&mut self, sender_acked: u64, plan: &Plan, frame_done: &mut dyn FnMut(u64)) {
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
    pub fn unacked(&self) -> Vec<Range<u64>> {
        let mut rest: Vec<Range<u64>> = self.items.iter().map(|i| i.range.clone()).collect();
        if let (Some(first), Some(item)) = (rest.first_mut(), self.items.front())
            && !item.frame
        {
            first.start += self.front_done;
        }
        rest.extend(self.unpushed.iter().cloned());
        rest
    }

    /// Bytes taken from the plan and not pushed yet.
    pub fn unpushed_bytes(&self) -> u64 {
        self.unpushed.iter().map(|r| r.end - r.start).sum()
    }

    /// About how many bytes this channel has yet to push, one of `channels` sharing `plan`:
    /// what it took and has not pushed, and its share of the chunks no channel took. What a
    /// sender is told (`Sender::expect_more_bytes`), so that its tail's code begins near the
    /// end.
    pub fn expected_more(&self, plan: &Plan, channels: usize) -> u64 {
        self.unpushed_bytes() + plan.untaken_bytes() / channels.max(1) as u64
    }

    /// Whether everything taken is acknowledged.
    pub fn all_acked(&self) -> bool {
        self.items.is_empty() && self.unpushed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(plan: &Plan) -> Vec<Range<u64>> {
        std::iter::from_fn(|| plan.take()).collect()
    }

    #[test]
    fn ranges_are_joined_then_cut_on_the_grid() {
        let plan = Plan::new(&[5..10, 10..25, 25..25, 30..41], 10);
        assert_eq!(plan.parts(), &[5..25, 30..41]);
        assert_eq!(plan.total(), 31);
        assert_eq!(drain(&plan), vec![5..10, 10..20, 20..25, 30..40, 40..41]);
        assert!(!plan.done());
    }

    #[test]
    fn given_back_chunks_go_first_in_order() {
        let plan = Plan::new(std::slice::from_ref(&(0..40)), 10);
        assert_eq!(plan.take(), Some(0..10));
        plan.give_back([3..5, 7..7, 8..10]);
        assert_eq!(drain(&plan), vec![3..5, 8..10, 10..20, 20..30, 30..40]);
    }

    #[test]
    fn untaken_and_unpushed_bytes_follow_takes_pushes_and_give_backs() {
        let plan = Plan::new(&[0..25, 30..40], 10);
        assert_eq!(plan.untaken_bytes(), 35);
        let mut taken = Taken::default();
        taken.take(plan.take().unwrap());
        taken.take(plan.take().unwrap());
        assert_eq!((plan.untaken_bytes(), taken.unpushed_bytes()), (15, 20));
        assert_eq!(taken.next(4), Some(0..4));
        assert_eq!((plan.untaken_bytes(), taken.unpushed_bytes()), (15, 16));
        plan.give_back([2..4, 6..6]);
        assert_eq!(plan.untaken_bytes(), 17);
        // Its own 16, and half of the 17 nobody took.
        assert_eq!(taken.expected_more(&plan, 2), 24);
        drain(&plan);
        assert_eq!(plan.untaken_bytes(), 0);
    }

    #[test]
    fn raw_bytes_are_credited_as_acknowledged() {
        let plan = Plan::new(std::slice::from_ref(&(0..30)), 10);
        let mut taken = Taken::default();
        taken.take(plan.take().unwrap());
        taken.take(plan.take().unwrap());
        while let Some(next) = taken.next(u64::MAX) {
            taken.pushed(next, None);
        }
        taken.credit(4, &plan, &mut |_| panic!("no frames"));
        assert_eq!(plan.acked_bytes(), 4);
        // The same cumulative count again credits nothing.
        taken.credit(4, &plan, &mut |_| panic!("no frames"));
        assert_eq!(plan.acked_bytes(), 4);
        assert_eq!(taken.unacked(), vec![4..10, 10..20]);
        taken.credit(20, &plan, &mut |_| panic!("no frames"));
        assert!(taken.all_acked());
        assert_eq!(plan.acked_bytes(), 20);
        assert!(!plan.done());
    }

    #[test]
    fn a_frame_counts_only_when_all_of_it_is_acknowledged() {
        let cell = COMPRESS_BLOCK_BYTES;
        let plan = Plan::new(std::slice::from_ref(&(0..2 * cell)), 4 * cell);
        let mut taken = Taken::default();
        taken.take(plan.take().unwrap());
        let first = taken.next(cell).unwrap();
        assert_eq!(first, 0..cell);
        assert!(plan.whole_piece(&first));
        taken.pushed(first, Some(100));
        let second = taken.next(cell).unwrap();
        assert_eq!(second, cell..2 * cell);
        taken.pushed(second, None);
        assert_eq!(taken.next(cell), None);
        let mut done = Vec::new();
        taken.credit(99, &plan, &mut |start| done.push(start));
        assert_eq!(plan.acked_bytes(), 0);
        // A half-acknowledged frame goes back whole.
        assert_eq!(taken.unacked(), vec![0..cell, cell..2 * cell]);
        taken.credit(110, &plan, &mut |start| done.push(start));
        assert_eq!(done, vec![0]);
        assert_eq!(plan.acked_bytes(), cell + 10);
        assert_eq!(taken.unacked(), vec![cell + 10..2 * cell]);
        // The rest handed back is not a whole piece: it must go raw.
        assert!(!plan.whole_piece(&(cell + 10..2 * cell)));
        taken.credit(100 + cell, &plan, &mut |start| done.push(start));
        assert!(taken.all_acked() && plan.done());
    }

    #[test]
    fn a_dead_channel_hands_its_rest_to_another() {
        let plan = Plan::new(std::slice::from_ref(&(0..100)), 10);
        let (mut a, mut b) = (Taken::default(), Taken::default());
        a.take(plan.take().unwrap());
        b.take(plan.take().unwrap());
        a.take(plan.take().unwrap());
        let first = a.next(u64::MAX).unwrap();
        a.pushed(first, None);
        a.credit(6, &plan, &mut |_| {});
        // `a` dies: its pushed rest and its unpushed chunk go back, first in line.
        plan.give_back(a.unacked());
        assert_eq!(plan.take(), Some(6..10));
        assert_eq!(plan.take(), Some(20..30));
        assert_eq!(plan.take(), Some(30..40));
        b.take(6..10);
        assert_eq!(plan.acked_bytes(), 6);
    }

    #[test]
    fn pieces_are_cells_of_the_parts() {
        let cell = COMPRESS_BLOCK_BYTES;
        let parts = [10..cell + 5, 3 * cell..3 * cell + 1];
        assert_eq!(piece_at(&parts, 10), Some(10..cell));
        assert_eq!(piece_at(&parts, cell + 4), Some(cell..cell + 5));
        assert_eq!(piece_at(&parts, cell + 5), None);
        assert_eq!(piece_at(&parts, 3 * cell), Some(3 * cell..3 * cell + 1));
        assert_eq!(piece_at(&parts, 9), None);
    }
}
