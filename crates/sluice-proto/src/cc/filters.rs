//! A windowed minimum of a controller's queue reports, so one odd report does not steer the rate.
//!
//! On a busy host a receiver, an emulator or a NIC stalls for a few milliseconds now and then:
//! for one ACK interval the reported queue jumps and the delivery rate dips, and the next
//! interval makes up for both. A controller that cuts on one such report cuts for a queue that
//! is not there. A standing queue is one whose minimum over a short window is high ([`RecentMin`]).

/// Reports kept by [`RecentMin`]: enough for its window at one report per SYN.
const MIN_SLOTS: usize = 8;

/// The minimum of the reports of the last `window_us` (always including the newest).
#[derive(Debug, Clone)]
pub(super) struct RecentMin {
    window_us: u64,
    /// (time, value), oldest overwritten first.
    slots: [(u64, f64); MIN_SLOTS],
    len: usize,
    next: usize,
}

impl RecentMin {
    /// A filter over the last `window_us`.
    pub(super) const fn new(window_us: u64) -> Self {
        Self { window_us, slots: [(0, 0.0); MIN_SLOTS], len: 0, next: 0 }
    }

    /// Records `value` reported at `now_us` and returns the minimum over the window.
    pub(super) fn update(&mut self, now_us: u64, value: f64) -> f64 {
        self.slots[self.next] = (now_us, value);
        self.next = (self.next + 1) % MIN_SLOTS;
        self.len = (self.len + 1).min(MIN_SLOTS);
        self.get(now_us)
    }

    /// The minimum over the window ending at `now_us`; 0 before any report.
    pub(super) fn get(&self, now_us: u64) -> f64 {
        let newest = self.slots[(self.next + MIN_SLOTS - 1) % MIN_SLOTS];
        self.slots[..self.len]
            .iter()
            .filter(|(t, _)| now_us.saturating_sub(*t) <= self.window_us)
            .map(|&(_, v)| v)
            .fold(if self.len == 0 { 0.0 } else { newest.1 }, f64::min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_min_ignores_one_high_report_and_follows_a_standing_one() {
        let mut q = RecentMin::new(30_000);
        assert_eq!(q.get(0), 0.0, "nothing reported");
        for t in 0..5 {
            q.update(t * 10_000, 200.0);
        }
        // One 6 ms report between short ones: not standing.
        assert_eq!(q.update(50_000, 6_000.0), 200.0);
        assert_eq!(q.update(60_000, 300.0), 200.0);
        // A queue that stays high for the whole window is standing.
        q.update(70_000, 7_000.0);
        q.update(80_000, 8_000.0);
        q.update(90_000, 9_000.0);
        assert_eq!(q.update(100_000, 7_500.0), 7_000.0);
    }

    #[test]
    fn recent_min_with_sparse_reports_keeps_the_newest() {
        let mut q = RecentMin::new(30_000);
        q.update(0, 100.0);
        // The previous report is older than the window: the newest alone counts.
        assert_eq!(q.update(500_000, 9_000.0), 9_000.0);
    }
}
