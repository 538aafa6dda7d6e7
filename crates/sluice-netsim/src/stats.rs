//! What the simulator counts: per link direction, per flow, and queueing delay.

use serde::Serialize;
use serde::ser::SerializeStruct;

/// A count of packets and their bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counter {
    /// Packets (datagrams).
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
}

impl Counter {
    pub(crate) fn add(&mut self, bytes: u64) {
        self.packets += 1;
        self.bytes += bytes;
    }
}

/// Counters of one link direction. Bytes are wire bytes (datagram plus
/// [`WIRE_OVERHEAD_BYTES`](crate::WIRE_OVERHEAD_BYTES)).
///
/// Every offered packet ends in exactly one of: dropped by the queue, by a blackout, by random
/// loss, delivered, or still in flight; duplicates add deliveries, so
/// `offered + duplicated = dropped_queue + dropped_blackout + dropped_loss + delivered + in_flight`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkStats {
    /// Packets handed to the link by endpoints.
    pub offered: Counter,
    /// Packets that did not fit in the drop-tail queue.
    pub dropped_queue: Counter,
    /// Packets lost because they left the queue during a blackout window.
    pub dropped_blackout: Counter,
    /// Packets lost by the random loss model.
    pub dropped_loss: Counter,
    /// Packets with one bit flipped (counted once, even if then duplicated).
    pub corrupted: Counter,
    /// Extra copies made by duplication.
    pub duplicated: Counter,
    /// Packets held back so that later ones could pass them.
    pub reordered: Counter,
    /// Packets (duplicates included) handed to the receiving endpoint.
    pub delivered: Counter,
    /// Time every packet admitted to the queue waited before its serialization began (nothing is
    /// recorded when the rate is unlimited: there is no queue).
    pub queue_delay: DelayHistogram,
    /// The largest queue occupancy (wire bytes, including the packet being serialized) seen.
    pub queue_bytes_max: u64,
}

impl LinkStats {
    pub(crate) fn new() -> Self {
        Self {
            offered: Counter::default(),
            dropped_queue: Counter::default(),
            dropped_blackout: Counter::default(),
            dropped_loss: Counter::default(),
            corrupted: Counter::default(),
            duplicated: Counter::default(),
            reordered: Counter::default(),
            delivered: Counter::default(),
            queue_delay: DelayHistogram::new(),
            queue_bytes_max: 0,
        }
    }

    /// All packets dropped, whatever the cause.
    pub fn dropped(&self) -> Counter {
        let all = [self.dropped_queue, self.dropped_blackout, self.dropped_loss];
        Counter {
            packets: all.iter().map(|c| c.packets).sum(),
            bytes: all.iter().map(|c| c.bytes).sum(),
        }
    }

    /// Packets still travelling (scheduled for delivery but not yet delivered).
    pub fn in_flight(&self) -> Counter {
        let dropped = self.dropped();
        Counter {
            packets: self.offered.packets + self.duplicated.packets
                - dropped.packets
                - self.delivered.packets,
            bytes: self.offered.bytes + self.duplicated.bytes
                - dropped.bytes
                - self.delivered.bytes,
        }
    }
}

/// Datagrams and datagram bytes (no header overhead) of one flow in one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DirectionStats {
    /// Datagrams the sending endpoint produced.
    pub sent: Counter,
    /// Datagrams handed to the receiving endpoint (duplicates included).
    pub delivered: Counter,
}

/// Per-flow counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FlowStats {
    /// `a -> b`.
    pub forward: DirectionStats,
    /// `b -> a`.
    pub reverse: DirectionStats,
    /// Times endpoint `a` still wanted to run at the instant it had just been run for, and was put
    /// off by 1 us (see [`Sim`](crate::Sim)).
    pub busy_wakeups_a: u64,
    /// The same for endpoint `b`.
    pub busy_wakeups_b: u64,
}

/// Sub-buckets per power of two: values are kept to within 1/64 (1.6 %).
const SUB_BITS: u32 = 6;
const SUB: usize = 1 << SUB_BITS;
/// Values below `2 * SUB` get a bucket each.
const EXACT: usize = 2 * SUB;
const BUCKETS: usize = EXACT + (64 - SUB_BITS as usize - 1) * SUB;

/// A fixed-size log-linear histogram of delays in nanoseconds: exact below 128 ns, then 64
/// buckets per power of two. Memory is constant (about 30 KiB); max and mean are exact.
#[derive(Clone, PartialEq)]
pub struct DelayHistogram {
    buckets: Box<[u64]>,
    count: u64,
    sum_ns: u128,
    max_ns: u64,
}

impl DelayHistogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self { buckets: vec![0; BUCKETS].into_boxed_slice(), count: 0, sum_ns: 0, max_ns: 0 }
    }

    fn bucket_of(value: u64) -> usize {
        if value < EXACT as u64 {
            return value as usize;
        }
        let top = 63 - value.leading_zeros(); // >= SUB_BITS + 1
        let sub = (value >> (top - SUB_BITS)) as usize & (SUB - 1);
        EXACT + (top - SUB_BITS - 1) as usize * SUB + sub
    }

    /// The smallest value that falls in `bucket`.
    fn bucket_low(bucket: usize) -> u64 {
        if bucket < EXACT {
            return bucket as u64;
        }
        let octave = (bucket - EXACT) / SUB;
        let sub = ((bucket - EXACT) % SUB) as u64;
        let top = octave as u32 + SUB_BITS + 1;
        (1u64 << top) | (sub << (top - SUB_BITS))
    }

    /// Adds one delay.
    pub fn record(&mut self, delay_ns: u64) {
        self.buckets[Self::bucket_of(delay_ns)] += 1;
        self.count += 1;
        self.sum_ns += u128::from(delay_ns);
        self.max_ns = self.max_ns.max(delay_ns);
    }

    /// How many delays were recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The largest delay recorded (0 if none).
    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }

    /// The mean delay (0 if none).
    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 { 0.0 } else { self.sum_ns as f64 / self.count as f64 }
    }

    /// The `q`-quantile (`q` in `[0, 1]`), as the low edge of its bucket, clamped to the max:
    /// within 1.6 % below the true value. 0 if nothing was recorded.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        // The rank (1-based) of the wanted sample.
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (bucket, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Self::bucket_low(bucket).min(self.max_ns);
            }
        }
        self.max_ns
    }

    /// The median.
    pub fn p50_ns(&self) -> u64 {
        self.quantile_ns(0.5)
    }

    /// The 99th percentile.
    pub fn p99_ns(&self) -> u64 {
        self.quantile_ns(0.99)
    }
}

impl Default for DelayHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for DelayHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelayHistogram")
            .field("count", &self.count)
            .field("mean_ns", &self.mean_ns())
            .field("p50_ns", &self.p50_ns())
            .field("p99_ns", &self.p99_ns())
            .field("max_ns", &self.max_ns)
            .finish()
    }
}

/// Serialized as its summary, not its buckets.
impl Serialize for DelayHistogram {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("DelayHistogram", 5)?;
        s.serialize_field("count", &self.count)?;
        s.serialize_field("mean_ns", &self.mean_ns())?;
        s.serialize_field("p50_ns", &self.p50_ns())?;
        s.serialize_field("p99_ns", &self.p99_ns())?;
        s.serialize_field("max_ns", &self.max_ns)?;
        s.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order() {
        let mut last = 0;
        for value in (0..5000u64).chain([u64::MAX / 3, u64::MAX - 1, u64::MAX]) {
            let bucket = DelayHistogram::bucket_of(value);
            assert!(bucket < BUCKETS);
            assert!(bucket >= last, "bucket of {value} went backwards");
            last = bucket;
            let low = DelayHistogram::bucket_low(bucket);
            assert!(low <= value && value - low <= value / 64, "value {value} low {low}");
            assert_eq!(DelayHistogram::bucket_of(low), bucket);
        }
        assert_eq!(DelayHistogram::bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_of_a_uniform_sample() {
        let mut h = DelayHistogram::new();
        for v in 1..=10_000 {
            h.record(v);
        }
        assert_eq!(h.count(), 10_000);
        assert_eq!(h.max_ns(), 10_000);
        assert!((h.mean_ns() - 5000.5).abs() < 1e-9);
        let p50 = h.p50_ns();
        assert!((4922..=5000).contains(&p50), "p50 {p50}");
        let p99 = h.p99_ns();
        assert!((9745..=9900).contains(&p99), "p99 {p99}");
        assert_eq!(h.quantile_ns(1.0), 9984);
        assert_eq!(DelayHistogram::new().p99_ns(), 0);
    }
}
