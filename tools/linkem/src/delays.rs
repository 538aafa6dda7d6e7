//! How long delivered packets waited in the bottleneck's queue: a histogram of 100 µs buckets
//! that one forwarding thread writes and any thread reads, for the report's quantiles (issue
//! 25: "alone, the median queuing delay stays at most 10 ms", measured at the link itself, not by
//! the transfer's own estimate).

use std::sync::atomic::{AtomicU64, Ordering};

/// Width of a bucket.
const BUCKET_NS: u64 = 100_000;
/// Buckets: up to 4 s of queue (a one-BDP queue of a 300 ms path holds 300 ms); the last one
/// also counts every longer wait.
const BUCKETS: usize = 40_000;

/// Queue waits of delivered packets.
#[derive(Debug)]
pub(crate) struct QueueDelays {
    buckets: Box<[AtomicU64]>,
}

impl Default for QueueDelays {
    fn default() -> Self {
        QueueDelays { buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect() }
    }
}

impl QueueDelays {
    /// Counts one packet that waited `waited_ns` before its serialization began. Only one
    /// thread records (no atomic read-modify-write needed).
    pub(crate) fn record(&self, waited_ns: u64) {
        let i = ((waited_ns / BUCKET_NS) as usize).min(BUCKETS - 1);
        let b = &self.buckets[i];
        b.store(b.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// The wait that the share `q` of the packets counted so far did not exceed, in µs, to
    /// within a bucket (its upper edge: 100 for a packet that did not wait); `None` before any.
    pub(crate) fn quantile_us(&self, q: f64) -> Option<u64> {
        let count = |b: &AtomicU64| b.load(Ordering::Relaxed);
        let total: u64 = self.buckets.iter().map(count).sum();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in self.buckets.iter().map(count).enumerate() {
            seen += n;
            if seen >= rank {
                return Some((i as u64 + 1) * BUCKET_NS / 1000);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_the_upper_edges_of_the_buckets_they_fall_in() {
        let d = QueueDelays::default();
        assert_eq!(d.quantile_us(0.5), None);
        // 60 packets that did not wait, 30 that waited 2.05 ms, 10 that waited 12.3 ms.
        (0..60).for_each(|_| d.record(0));
        (0..30).for_each(|_| d.record(2_050_000));
        (0..10).for_each(|_| d.record(12_300_000));
        assert_eq!(d.quantile_us(0.5), Some(100));
        assert_eq!(d.quantile_us(0.6), Some(100));
        assert_eq!(d.quantile_us(0.61), Some(2_100));
        assert_eq!(d.quantile_us(0.9), Some(2_100));
        assert_eq!(d.quantile_us(0.99), Some(12_400));
        assert_eq!(d.quantile_us(1.0), Some(12_400));
        // Beyond the last bucket: counted in it.
        d.record(60_000_000_000);
        assert_eq!(d.quantile_us(1.0), Some(BUCKETS as u64 * BUCKET_NS / 1000));
    }
}
