//! How long a receiver waits before it reports a gap as lost.
//!
//! UDT's receiver reports a gap the moment a later packet shows it. A path that reorders
//! (jitter larger than the packets' spacing: 100 µs of it at 1 Gbit/s moves a packet past
//! eight others) then has every late packet repaired as if lost: in simulation at 100 ms, 1 %
//! loss, 19 % of the packets went twice, the loss-trend test read the reordering as congestion,
//! and the link ran at 0.52-0.66. So the receiver learns the path's reordering, as RACK does
//! for TCP (RFC 8985): a packet that was not sent again (no `RETRANSMIT` flag) and fills a gap
//! arrived late, by the time since the gap opened; the wait before a gap is reported grows to
//! a quarter more than the latest such delay, and is capped at a quarter of the round trip and
//! at [`MAX_WAIT_US`]. Until the path first reorders the wait is zero: a gap is reported at
//! once, as before.

use std::collections::VecDeque;

/// The longest wait before a gap is reported.
pub const MAX_WAIT_US: u64 = 10_000;
/// Gaps remembered, reported or not; beyond this the oldest waiting one is reported at once.
const MAX_GAPS: usize = 1024;
/// How long a reported gap is remembered, to time a packet that fills it late: this many
/// times the wait, and at least [`MIN_REMEMBER_US`].
const REMEMBER_WAITS: u64 = 4;
const MIN_REMEMBER_US: u64 = 1_000;

#[derive(Debug, Clone, Copy)]
struct Gap {
    lo: u64,
    hi: u64,
    seen_us: u64,
    reported: bool,
    /// Due at once: the memory was full.
    forced: bool,
}

/// The gaps a receiver has seen and the wait before it reports one.
///
/// The gaps are in the order they opened, which is the order of their sequence numbers, and
/// every waiting gap waits the same time: they come due in that order. So the first waiting gap
/// is the next due, and a late packet's gap is found by binary search.
#[derive(Debug, Clone, Default)]
pub struct Reorder {
    wait_us: u64,
    gaps: VecDeque<Gap>,
    /// Every gap before this index is reported.
    first_waiting: usize,
}

impl Reorder {
    /// No reordering seen yet: gaps are reported at once.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long a gap now waits before it is reported.
    pub fn wait_us(&self) -> u64 {
        self.wait_us
    }

    /// Sequence numbers `lo..=hi` went missing at `now_us`. Returns whether to report them now
    /// (otherwise [`Reorder::due`] gives them back once their wait is over).
    pub fn on_gap(&mut self, lo: u64, hi: u64, now_us: u64) -> bool {
        let reported = self.wait_us == 0;
        let remember_us = (REMEMBER_WAITS * self.wait_us).max(MIN_REMEMBER_US);
        while self.gaps.front().is_some_and(|g| g.reported && now_us >= g.seen_us + remember_us) {
            self.gaps.pop_front();
            self.first_waiting = self.first_waiting.saturating_sub(1);
        }
        if self.gaps.len() >= MAX_GAPS {
            self.gaps.retain(|g| !g.reported || now_us < g.seen_us + remember_us);
            self.first_waiting =
                self.gaps.iter().position(|g| !g.reported).unwrap_or(self.gaps.len());
        }
        if self.gaps.len() >= MAX_GAPS {
            // Full of gaps still waiting: the oldest is due now, and this one is not kept.
            if let Some(oldest) = self.gaps.get_mut(self.first_waiting) {
                oldest.forced = true;
            }
            return true;
        }
        self.gaps.push_back(Gap { lo, hi, seen_us: now_us, reported, forced: false });
        self.skip_reported();
        reported
    }

    /// Sequence number `dsn`, sent once, filled a gap at `now_us`: the path reordered it. The
    /// wait grows to cover that delay, within `cap_us` (and [`MAX_WAIT_US`]).
    pub fn on_late(&mut self, dsn: u64, now_us: u64, cap_us: u64) {
        let at = self.gaps.partition_point(|g| g.hi < dsn);
        if let Some(gap) = self.gaps.get(at).filter(|g| g.lo <= dsn) {
            let late_us = now_us.saturating_sub(gap.seen_us);
            let wait_us = late_us + late_us / 4;
            self.wait_us = self.wait_us.max(wait_us).min(cap_us.min(MAX_WAIT_US));
        }
    }

    /// A gap whose wait is over at `now_us`, marked reported; `None` when none is.
    pub fn due(&mut self, now_us: u64) -> Option<(u64, u64)> {
        if self.next_due_us()? > now_us {
            return None;
        }
        let gap = &mut self.gaps[self.first_waiting];
        gap.reported = true;
        let found = (gap.lo, gap.hi);
        self.skip_reported();
        Some(found)
    }

    /// When the next waiting gap is due.
    pub fn next_due_us(&self) -> Option<u64> {
        let gap = self.gaps.get(self.first_waiting)?;
        Some(if gap.forced { gap.seen_us } else { gap.seen_us + self.wait_us })
    }

    /// Moves `first_waiting` past the gaps reported.
    fn skip_reported(&mut self) {
        while self.gaps.get(self.first_waiting).is_some_and(|g| g.reported) {
            self.first_waiting += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_reported_at_once_until_the_path_reorders() {
        let mut r = Reorder::new();
        assert!(r.on_gap(10, 12, 1_000));
        assert_eq!(r.next_due_us(), None);
        // Packet 11 arrives 80 us after its gap opened, not sent again: reordered.
        r.on_late(11, 1_080, 25_000);
        assert_eq!(r.wait_us(), 100);
        // The next gap waits 100 us.
        assert!(!r.on_gap(20, 20, 2_000));
        assert_eq!(r.next_due_us(), Some(2_100));
        assert_eq!(r.due(2_099), None);
        assert_eq!(r.due(2_100), Some((20, 20)));
        assert_eq!(r.due(2_100), None, "reported once");
        assert_eq!(r.next_due_us(), None);
    }

    #[test]
    fn the_wait_is_capped() {
        let mut r = Reorder::new();
        r.on_gap(5, 5, 0);
        r.on_late(5, 30_000, 8_000);
        assert_eq!(r.wait_us(), 8_000, "a quarter of a 32 ms round trip");
        r.on_gap(6, 6, 40_000);
        r.on_late(6, 70_000, 1_000_000);
        assert_eq!(r.wait_us(), MAX_WAIT_US);
        // A packet that fills no remembered gap changes nothing.
        r.on_late(99, 80_000, 1_000_000);
        assert_eq!(r.wait_us(), MAX_WAIT_US);
    }

    #[test]
    fn a_full_memory_of_waiting_gaps_reports_the_oldest() {
        let mut r = Reorder::new();
        r.on_gap(0, 0, 0);
        r.on_late(0, 1_000, 1_000_000);
        for i in 0..MAX_GAPS as u64 {
            r.on_gap(10 + i, 10 + i, 2_000 + i);
        }
        // The next gap finds no room: it is reported at once, and the oldest is due now.
        assert!(r.on_gap(1_000, 1_000, 2_500));
        assert!(r.next_due_us().unwrap() <= 2_500);
    }
}
