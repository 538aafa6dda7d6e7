//! A windowed minimum of a controller's reports, so one odd report does not steer the rate.
//!
//! On a busy host a receiver, an emulator or a NIC stalls for a few milliseconds now and then:
//! for one ACK interval the reported queue jumps and the delivery rate dips, and the next
//! interval makes up for both. A controller that cuts on one such report cuts for a queue that
//! is not there. A standing queue is one whose minimum over a short window is high ([`RecentMin`]).
//!
//! The same host stalls bunch packets together: pairs delivered back to back read as a link
//! several times faster than the real one, far more often than a late wake-up stretches a pair
//! into a slower reading. The least capacity reported over a longer window
//! ([`RecentMin::bucketed`]) is the link's, where bunching is caught.
//!
//! Where it is not, the pairs scatter both ways around the link, and over a second the least of
//! a hundred reports is the low tail: in the relay topology (100 Mbit/s links, a busy 2-core
//! host) the reports' median read the link (98 Mbit/s of payload), their 1st percentile 83,
//! and a rate that climbed only to the least held at 0.85-0.90 of the link. A low quantile of the
//! last second's reports ([`RecentQuantile`]) is the link's there.

/// Slots kept by [`RecentMin`]: one per report for the queue's short window at one report per
/// SYN; one per eighth of the window when bucketed.
const MIN_SLOTS: usize = 8;

/// The last [`MIN_SLOTS`] slots of reports, each the `pick` (least or greatest) of the reports
/// it holds: what [`RecentMin`] and [`RecentMax`] keep.
#[derive(Debug, Clone)]
struct Slots {
    /// (time of the slot's first report, picked value of the slot), oldest overwritten first.
    slots: [(u64, f64); MIN_SLOTS],
    len: usize,
    next: usize,
}

impl Slots {
    const fn new() -> Self {
        Self { slots: [(0, 0.0); MIN_SLOTS], len: 0, next: 0 }
    }

    /// Records `value` at `now_us`: into the newest slot when its first report is less than
    /// `bucket_us` old, else into a new slot.
    fn record(&mut self, now_us: u64, value: f64, bucket_us: u64, pick: fn(f64, f64) -> f64) {
        let newest = (self.next + MIN_SLOTS - 1) % MIN_SLOTS;
        if self.len > 0 && now_us < self.slots[newest].0 + bucket_us {
            self.slots[newest].1 = pick(self.slots[newest].1, value);
        } else {
            self.slots[self.next] = (now_us, value);
            self.next = (self.next + 1) % MIN_SLOTS;
            self.len = (self.len + 1).min(MIN_SLOTS);
        }
    }

    /// The pick over the slots of the window ending at `now_us` (always including the newest);
    /// 0 before any report.
    fn over(&self, now_us: u64, window_us: u64, pick: fn(f64, f64) -> f64) -> f64 {
        let newest = self.slots[(self.next + MIN_SLOTS - 1) % MIN_SLOTS];
        self.slots[..self.len]
            .iter()
            .filter(|(t, _)| now_us.saturating_sub(*t) <= window_us)
            .map(|&(_, v)| v)
            .fold(if self.len == 0 { 0.0 } else { newest.1 }, pick)
    }
}

/// The minimum of the reports of the last `window_us` (always including the newest).
#[derive(Debug, Clone)]
pub(super) struct RecentMin {
    window_us: u64,
    /// Reports closer than this to the newest slot's first one share its slot (0: every report
    /// has a slot of its own).
    bucket_us: u64,
    slots: Slots,
}

impl RecentMin {
    /// A filter over the last `window_us`, which holds the last [`MIN_SLOTS`] reports.
    pub(super) const fn new(window_us: u64) -> Self {
        Self { window_us, bucket_us: 0, slots: Slots::new() }
    }

    /// A filter over the last `window_us` at any report rate: reports within an eighth of the
    /// window of each other share a slot. A slot leaves the window when its first report does.
    pub(super) const fn bucketed(window_us: u64) -> Self {
        Self { bucket_us: window_us / MIN_SLOTS as u64, ..Self::new(window_us) }
    }

    /// Records `value` reported at `now_us` and returns the minimum over the window.
    pub(super) fn update(&mut self, now_us: u64, value: f64) -> f64 {
        self.slots.record(now_us, value, self.bucket_us, f64::min);
        self.get(now_us)
    }

    /// The minimum over the window ending at `now_us`; 0 before any report.
    pub(super) fn get(&self, now_us: u64) -> f64 {
        self.slots.over(now_us, self.window_us, f64::min)
    }
}

/// The maximum of the reports of a window given at every update (always including the
/// newest), in eight slots: reports within an eighth of the window of each other share a slot.
/// What the path has been seen to deliver: bunched or stalled delivery dips a report or two,
/// a windowed maximum keeps what the path carried over several round trips.
#[derive(Debug, Clone)]
pub(super) struct RecentMax {
    window_us: u64,
    slots: Slots,
}

impl RecentMax {
    /// A filter that has seen no report.
    pub(super) const fn new() -> Self {
        Self { window_us: 0, slots: Slots::new() }
    }

    /// Records `value` reported at `now_us` with the window now `window_us` long.
    pub(super) fn update(&mut self, now_us: u64, value: f64, window_us: u64) {
        self.window_us = window_us;
        self.slots.record(now_us, value, window_us / MIN_SLOTS as u64, f64::max);
    }

    /// The maximum over the window ending at `now_us`; 0 before any report.
    pub(super) fn get(&self, now_us: u64) -> f64 {
        self.slots.over(now_us, self.window_us, f64::max)
    }
}

/// Reports [`RecentQuantile`] keeps: at one report per SYN (a coupled group's controller hears
/// its pilot's ACKs only), the last 0.64 s.
const QUANTILE_REPORTS: usize = 64;

/// A quantile of the reports of the last `window_us`, or of the last [`QUANTILE_REPORTS`] of
/// them when more came (always including the newest).
#[derive(Debug, Clone)]
pub(super) struct RecentQuantile {
    window_us: u64,
    /// (time, value) of the latest reports, oldest overwritten first.
    reports: [(u64, f64); QUANTILE_REPORTS],
    len: usize,
    next: usize,
}

impl RecentQuantile {
    /// A filter over the last `window_us` that has seen no report.
    pub(super) const fn new(window_us: u64) -> Self {
        Self { window_us, reports: [(0, 0.0); QUANTILE_REPORTS], len: 0, next: 0 }
    }

    /// Records `value` reported at `now_us`.
    pub(super) fn update(&mut self, now_us: u64, value: f64) {
        self.reports[self.next] = (now_us, value);
        self.next = (self.next + 1) % QUANTILE_REPORTS;
        self.len = (self.len + 1).min(QUANTILE_REPORTS);
    }

    /// The `q`-quantile (0 the least, 1 the greatest; the lower of two neighbours) of the
    /// reports of the window ending at `now_us`, the newest always among them; 0 before any.
    pub(super) fn get(&self, now_us: u64, q: f64) -> f64 {
        if self.len == 0 {
            return 0.0;
        }
        let newest = (self.next + QUANTILE_REPORTS - 1) % QUANTILE_REPORTS;
        let mut values = [0.0; QUANTILE_REPORTS];
        let mut n = 0;
        for (i, &(t, v)) in self.reports[..self.len].iter().enumerate() {
            if i == newest || now_us.saturating_sub(t) <= self.window_us {
                values[n] = v;
                n += 1;
            }
        }
        let values = &mut values[..n];
        values.sort_unstable_by(f64::total_cmp);
        values[((n - 1) as f64 * q.clamp(0.0, 1.0)) as usize]
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

    #[test]
    fn a_bucketed_min_spans_its_window_at_any_report_rate() {
        // One report per 10 ms over a 1 s window: 100 reports, 8 slots of 125 ms.
        let mut c = RecentMin::bucketed(1_000_000);
        c.update(0, 80_000.0);
        for t in 1..100 {
            // Bunched pairs read three times the link; the one true reading still counts.
            assert_eq!(c.update(t * 10_000, 240_000.0), 80_000.0, "at {} ms", t * 10);
        }
        // Once the true reading's slot has left the window, the junk is all there is.
        assert_eq!(c.update(1_010_000, 240_000.0), 240_000.0);
        // A lower reading counts at once.
        assert_eq!(c.update(1_020_000, 70_000.0), 70_000.0);
    }

    #[test]
    fn a_recent_max_keeps_the_best_report_of_its_window() {
        let mut d = RecentMax::new();
        assert_eq!(d.get(0), 0.0, "nothing reported");
        d.update(0, 80_000.0, 1_000_000);
        for t in 1..100 {
            // A stall dips the reports; what the path carried a round trip ago still counts.
            d.update(t * 10_000, 40_000.0, 1_000_000);
            assert_eq!(d.get(t * 10_000), 80_000.0, "at {} ms", t * 10);
        }
        // Once the good report's slot has left the window, the newer ones are all there is.
        d.update(1_010_000, 40_000.0, 1_000_000);
        assert_eq!(d.get(1_010_000), 40_000.0);
    }

    #[test]
    fn a_recent_quantile_reads_through_scattered_reports_and_forgets_old_ones() {
        let mut c = RecentQuantile::new(1_000_000);
        assert_eq!(c.get(0, 0.25), 0.0, "nothing reported");
        // Pairs scattered around a link of 100: 83 to 115, as on a busy host.
        let scatter = [100.0, 83.0, 115.0, 98.0, 94.0, 105.0, 90.0, 101.0];
        for t in 0..40u64 {
            c.update(t * 10_000, scatter[t as usize % scatter.len()]);
        }
        assert_eq!(c.get(390_000, 0.0), 83.0, "the least");
        assert_eq!(c.get(390_000, 0.25), 90.0, "an eighth read 83, an eighth 90");
        assert_eq!(c.get(390_000, 0.5), 98.0);
        // More than it keeps: the latest QUANTILE_REPORTS count.
        for t in 40..200u64 {
            c.update(t * 10_000, if t < 150 { 50.0 } else { 100.0 });
        }
        assert_eq!(c.get(1_990_000, 0.0), 50.0, "14 of the last 64 read 50");
        assert_eq!(c.get(1_990_000, 0.25), 100.0, "the older 50s are gone");
        // Older than the window: the newest alone counts.
        assert_eq!(c.get(5_000_000, 0.0), 100.0);
    }
}
