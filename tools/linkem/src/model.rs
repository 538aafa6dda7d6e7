//! The link model: every decision the emulator takes about a packet, as pure functions of the
//! configuration, the seed, the packet's arrival index and its arrival time. No I/O, no clock.
//!
//! A packet that arrives at one direction of the link goes through, in this order:
//! 0. the black hole: a packet longer than `black_hole_above_bytes` is dropped without a word,
//!    as a path whose MTU is below what both hosts believe drops it when no ICMP comes back;
//! 1. the loss model (Bernoulli or Gilbert-Elliott), decided by the seed and the arrival index;
//! 2. the bottleneck: a drop-tail queue in front of a serializer at `rate_bps`;
//! 3. the propagation delay plus optional jitter (never reordering unless asked);
//! 4. optional reordering (the packet is held back by `reorder_gap_ns`, so later ones overtake it);
//! 5. optional duplication (a copy is released right after the original).

use std::collections::VecDeque;

/// Which direction of the link a model instance serves; it selects independent random streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From namespace a to namespace b.
    AToB,
    /// From namespace b to namespace a.
    BToA,
}

impl Direction {
    /// Short name used in counters and thread names: `a2b` or `b2a`.
    pub fn name(self) -> &'static str {
        match self {
            Direction::AToB => "a2b",
            Direction::BToA => "b2a",
        }
    }

    fn stream_base(self) -> u64 {
        match self {
            Direction::AToB => 0x0a2b_0000,
            Direction::BToA => 0x0b2a_0000,
        }
    }
}

/// Random streams, one per kind of decision, so enabling one impairment does not change the
/// outcomes of another.
#[derive(Debug, Clone, Copy)]
enum Stream {
    Loss = 1,
    LossTransition = 2,
    Jitter = 3,
    Reorder = 4,
    Duplicate = 5,
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A counter-based random number: a pure function of the seed, a stream number and an index.
pub fn random_u64(seed: u64, stream: u64, index: u64) -> u64 {
    splitmix64(splitmix64(seed ^ splitmix64(stream)) ^ index)
}

/// A uniform number in `[0, 1)` from [`random_u64`].
pub fn random_unit(seed: u64, stream: u64, index: u64) -> f64 {
    // 53 random bits scaled into [0, 1).
    (random_u64(seed, stream, index) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// How packets are lost at random.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LossConfig {
    /// No random loss.
    None,
    /// Each packet is lost independently with this probability.
    Bernoulli {
        /// Loss probability in `[0, 1]`.
        p: f64,
    },
    /// Simple Gilbert model (Gilbert-Elliott with loss probability 1 in the bad state and 0 in
    /// the good state): losses come in bursts with a geometric length of mean `mean_burst`.
    GilbertElliott {
        /// Long-run share of packets lost, in `[0, 1)`.
        mean_loss: f64,
        /// Mean length of a loss burst in packets, at least 1.
        mean_burst: f64,
    },
}

impl LossConfig {
    /// The Gilbert-Elliott transition probabilities `(p_good_to_bad, p_bad_to_good)`.
    pub fn ge_transitions(mean_loss: f64, mean_burst: f64) -> (f64, f64) {
        let r = 1.0 / mean_burst;
        let p = mean_loss * r / (1.0 - mean_loss);
        (p, r)
    }

    /// Checks the parameters; returns a message for a bad one.
    pub fn validate(&self) -> Result<(), String> {
        match *self {
            LossConfig::None => Ok(()),
            LossConfig::Bernoulli { p } if (0.0..=1.0).contains(&p) => Ok(()),
            LossConfig::Bernoulli { p } => Err(format!("loss probability {p} is not in [0, 1]")),
            LossConfig::GilbertElliott { mean_loss, mean_burst } => {
                if !(0.0..1.0).contains(&mean_loss) {
                    return Err(format!("bursty mean loss {mean_loss} is not in [0, 1)"));
                }
                if mean_burst.is_nan() || mean_burst < 1.0 {
                    return Err(format!("mean burst length {mean_burst} is below 1 packet"));
                }
                let (p, _) = Self::ge_transitions(mean_loss, mean_burst);
                if p > 1.0 {
                    return Err(format!(
                        "mean loss {mean_loss} with mean burst {mean_burst} needs a good-to-bad \
                         probability above 1"
                    ));
                }
                Ok(())
            }
        }
    }
}

/// The loss decision for one direction: deterministic for a given seed and sequence of arrival
/// indices 0, 1, 2, ...
#[derive(Debug, Clone)]
pub struct LossModel {
    config: LossConfig,
    seed: u64,
    stream_base: u64,
    bad: bool,
}

impl LossModel {
    /// A loss model for one direction, in the good state.
    pub fn new(config: LossConfig, seed: u64, direction: Direction) -> Self {
        LossModel { config, seed, stream_base: direction.stream_base(), bad: false }
    }

    /// Whether the packet with this arrival index is lost. Indices must be presented in order
    /// 0, 1, 2, ... (the Gilbert-Elliott state carries over from one packet to the next); the
    /// Bernoulli decision depends on the index alone.
    pub fn is_lost(&mut self, index: u64) -> bool {
        match self.config {
            LossConfig::None => false,
            LossConfig::Bernoulli { p } => {
                random_unit(self.seed, self.stream_base + Stream::Loss as u64, index) < p
            }
            LossConfig::GilbertElliott { mean_loss, mean_burst } => {
                let lost = self.bad;
                let (p, r) = LossConfig::ge_transitions(mean_loss, mean_burst);
                let u =
                    random_unit(self.seed, self.stream_base + Stream::LossTransition as u64, index);
                self.bad = if self.bad { u >= r } else { u < p };
                lost
            }
        }
    }
}

/// The loss decisions for packets `0..n` as a vector (for tests and tools).
pub fn loss_pattern(config: LossConfig, seed: u64, direction: Direction, n: u64) -> Vec<bool> {
    let mut model = LossModel::new(config, seed, direction);
    (0..n).map(|i| model.is_lost(i)).collect()
}

/// The limit of the drop-tail queue in front of the bottleneck.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueLimit {
    /// At most this many bytes queued (the packet being serialized included); an empty queue
    /// takes any packet.
    Bytes(u64),
    /// At most this many packets queued (the packet being serialized included).
    Packets(u64),
}

/// A bottleneck: a serializer at a fixed rate behind a drop-tail queue.
#[derive(Debug, Clone)]
pub struct Bottleneck {
    rate_bps: u64,
    limit: QueueLimit,
    link_free_ns: u64,
    /// Serialization end time and size of each packet still in the queue, in FIFO order.
    backlog: VecDeque<(u64, u32)>,
    backlog_bytes: u64,
}

impl Bottleneck {
    /// A bottleneck at `rate_bps` (0 means unlimited: no serialization delay, no queue).
    pub fn new(rate_bps: u64, limit: QueueLimit) -> Self {
        Bottleneck { rate_bps, limit, link_free_ns: 0, backlog: VecDeque::new(), backlog_bytes: 0 }
    }

    /// Serialization time of `size` bytes at the bottleneck rate, in nanoseconds.
    pub fn tx_time_ns(&self, size: u32) -> u64 {
        if self.rate_bps == 0 {
            return 0;
        }
        ((u128::from(size) * 8 * 1_000_000_000) / u128::from(self.rate_bps)) as u64
    }

    /// A packet of `size` bytes arrives at `now_ns` (times never go backwards). Returns the time
    /// its last bit leaves the bottleneck, or `None` if the queue is full and it is dropped.
    pub fn arrive(&mut self, now_ns: u64, size: u32) -> Option<u64> {
        if self.rate_bps == 0 {
            return Some(now_ns);
        }
        while let Some(&(end, sz)) = self.backlog.front() {
            if end > now_ns {
                break;
            }
            self.backlog.pop_front();
            self.backlog_bytes -= u64::from(sz);
        }
        // An empty queue always takes a packet, even one larger than a byte limit.
        let full = !self.backlog.is_empty()
            && match self.limit {
                QueueLimit::Bytes(b) => self.backlog_bytes + u64::from(size) > b,
                QueueLimit::Packets(p) => self.backlog.len() as u64 + 1 > p,
            };
        if full {
            return None;
        }
        let start = self.link_free_ns.max(now_ns);
        let end = start + self.tx_time_ns(size);
        self.link_free_ns = end;
        self.backlog.push_back((end, size));
        self.backlog_bytes += u64::from(size);
        Some(end)
    }

    /// Bytes queued at `now_ns` as last seen by [`Bottleneck::arrive`].
    pub fn backlog_bytes(&self) -> u64 {
        self.backlog_bytes
    }
}

/// All impairments of one direction of the link.
#[derive(Debug, Clone, PartialEq)]
pub struct DirectionConfig {
    /// Bottleneck rate in bit/s; 0 means unlimited.
    pub rate_bps: u64,
    /// Drop-tail queue limit; `None` means one bandwidth-delay product (see
    /// [`default_queue_limit`]).
    pub queue: Option<QueueLimit>,
    /// One-way propagation delay in nanoseconds.
    pub delay_ns: u64,
    /// Jitter: each packet's delay is drawn uniformly from `delay ± jitter` (at least 0).
    pub jitter_ns: u64,
    /// Whether jitter may reorder packets; if false, a packet is never released before the
    /// one that arrived before it.
    pub jitter_reorders: bool,
    /// Random loss.
    pub loss: LossConfig,
    /// Probability that a packet is held back by `reorder_gap_ns` so later packets overtake it.
    pub reorder: f64,
    /// Extra delay of a reordered packet, in nanoseconds.
    pub reorder_gap_ns: u64,
    /// Probability that a packet is delivered twice.
    pub duplicate: f64,
    /// IP packets longer than this many bytes are dropped silently (a path MTU black hole:
    /// no ICMP goes back, so the sender's kernel keeps its larger path MTU).
    pub black_hole_above_bytes: Option<u32>,
}

impl Default for DirectionConfig {
    fn default() -> Self {
        DirectionConfig {
            rate_bps: 0,
            queue: None,
            delay_ns: 0,
            jitter_ns: 0,
            jitter_reorders: false,
            loss: LossConfig::None,
            reorder: 0.0,
            reorder_gap_ns: 1_000_000,
            duplicate: 0.0,
            black_hole_above_bytes: None,
        }
    }
}

impl DirectionConfig {
    /// Checks every parameter; returns a message for the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        self.loss.validate()?;
        for (name, p) in [("reorder", self.reorder), ("duplicate", self.duplicate)] {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{name} probability {p} is not in [0, 1]"));
            }
        }
        match self.queue {
            Some(QueueLimit::Bytes(0)) | Some(QueueLimit::Packets(0)) => {
                Err("queue limit must be above 0".into())
            }
            _ => Ok(()),
        }
    }
}

/// Smallest default queue: 64 full-size packets.
pub const MIN_DEFAULT_QUEUE_BYTES: u64 = 64 * 1500;

/// One bandwidth-delay product of the base round trip (`rate × (delay + reverse delay)`), at
/// least [`MIN_DEFAULT_QUEUE_BYTES`].
pub fn default_queue_limit(rate_bps: u64, delay_ns: u64, reverse_delay_ns: u64) -> QueueLimit {
    let rtt_ns = u128::from(delay_ns) + u128::from(reverse_delay_ns);
    let bdp = (u128::from(rate_bps) * rtt_ns / 8 / 1_000_000_000) as u64;
    QueueLimit::Bytes(bdp.max(MIN_DEFAULT_QUEUE_BYTES))
}

/// Why a packet was not delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Random (Bernoulli or bursty) loss.
    Loss,
    /// The bottleneck queue was full.
    Queue,
    /// Longer than the black hole lets through.
    TooBig,
}

/// What happens to one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not delivered.
    Drop(DropReason),
    /// Delivered at `release_ns` (and a second time right after if `duplicate`).
    Deliver {
        /// When the packet leaves the emulator.
        release_ns: u64,
        /// Whether this release time may be earlier than that of an earlier packet (reordering
        /// asked for); if false it is never earlier.
        out_of_order: bool,
        /// Whether the packet was held back on purpose to be reordered.
        reordered: bool,
        /// Whether a copy is delivered too.
        duplicate: bool,
    },
}

/// The complete, deterministic decision logic of one direction.
#[derive(Debug, Clone)]
pub struct Shaper {
    config: DirectionConfig,
    seed: u64,
    stream_base: u64,
    loss: LossModel,
    bottleneck: Bottleneck,
    next_index: u64,
    last_in_order_release_ns: u64,
}

impl Shaper {
    /// A shaper for one direction; `queue` is the resolved queue limit.
    pub fn new(
        config: DirectionConfig,
        queue: QueueLimit,
        seed: u64,
        direction: Direction,
    ) -> Self {
        Shaper {
            loss: LossModel::new(config.loss, seed, direction),
            bottleneck: Bottleneck::new(config.rate_bps, queue),
            config,
            seed,
            stream_base: direction.stream_base(),
            next_index: 0,
            last_in_order_release_ns: 0,
        }
    }

    fn unit(&self, stream: Stream, index: u64) -> f64 {
        random_unit(self.seed, self.stream_base + stream as u64, index)
    }

    /// Decides the fate of the next packet, of `size` bytes, arriving at `now_ns` (arrival times
    /// never go backwards). The arrival index is counted internally, starting at 0.
    pub fn on_packet(&mut self, now_ns: u64, size: u32) -> Verdict {
        let index = self.next_index;
        self.next_index += 1;
        // The loss model sees every arrival in order (the Gilbert-Elliott state carries over
        // from one to the next), so the black hole leaves the other packets' fates alone.
        let lost = self.loss.is_lost(index);
        if self.config.black_hole_above_bytes.is_some_and(|limit| size > limit) {
            return Verdict::Drop(DropReason::TooBig);
        }
        if lost {
            return Verdict::Drop(DropReason::Loss);
        }
        let Some(tx_end) = self.bottleneck.arrive(now_ns, size) else {
            return Verdict::Drop(DropReason::Queue);
        };
        let c = &self.config;
        let mut release = tx_end + c.delay_ns;
        if c.jitter_ns > 0 {
            let u = self.unit(Stream::Jitter, index);
            let offset = (u * (2 * c.jitter_ns + 1) as f64) as u64;
            release = (release + offset).saturating_sub(c.jitter_ns).max(tx_end);
        }
        let reordered = c.reorder > 0.0 && self.unit(Stream::Reorder, index) < c.reorder;
        let duplicate = c.duplicate > 0.0 && self.unit(Stream::Duplicate, index) < c.duplicate;
        let out_of_order;
        if reordered {
            release += c.reorder_gap_ns;
            out_of_order = true;
        } else if c.jitter_ns > 0 && c.jitter_reorders {
            out_of_order = true;
        } else {
            release = release.max(self.last_in_order_release_ns);
            self.last_in_order_release_ns = release;
            out_of_order = false;
        }
        Verdict::Deliver { release_ns: release, out_of_order, reordered, duplicate }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allowed deviation of a loss count: `k` standard deviations plus a small constant.
    fn tolerance(sd: f64) -> f64 {
        5.0 * sd + 3.0
    }

    #[test]
    fn bernoulli_share_matches_within_statistical_tolerance() {
        for (seed, p) in [(1u64, 0.001), (2, 0.01), (3, 0.03), (4, 0.1), (5, 0.5)] {
            let n = 200_000u64;
            let lost = loss_pattern(LossConfig::Bernoulli { p }, seed, Direction::AToB, n);
            let count = lost.iter().filter(|&&l| l).count() as f64;
            let mean = n as f64 * p;
            let sd = (n as f64 * p * (1.0 - p)).sqrt();
            println!("seed {seed} p {p}: {count} lost, expected {mean} ± {}", tolerance(sd));
            assert!((count - mean).abs() <= tolerance(sd), "seed {seed} p {p}: {count} vs {mean}");
        }
    }

    #[test]
    fn gilbert_elliott_share_and_burst_length_match() {
        for (seed, loss, burst) in [(7u64, 0.01, 10.0), (8, 0.03, 3.0), (9, 0.1, 1.0)] {
            let n = 1_000_000u64;
            let config = LossConfig::GilbertElliott { mean_loss: loss, mean_burst: burst };
            config.validate().unwrap();
            let lost = loss_pattern(config, seed, Direction::BToA, n);
            let count = lost.iter().filter(|&&l| l).count() as f64;
            let bursts = lost.windows(2).filter(|w| !w[0] && w[1]).count() as f64;
            // A two-state Markov chain: the lag-k autocorrelation of the loss indicator is
            // rho^k with rho = 1 - p - r, so Var(count) ~ n L (1 - L) (1 + rho) / (1 - rho).
            let (p, r) = LossConfig::ge_transitions(loss, burst);
            let rho = 1.0 - p - r;
            let sd = (n as f64 * loss * (1.0 - loss) * (1.0 + rho) / (1.0 - rho)).sqrt();
            let mean = n as f64 * loss;
            println!(
                "seed {seed}: {count} lost in {bursts} bursts, expected {mean} ± {}",
                5.0 * sd
            );
            assert!((count - mean).abs() <= tolerance(sd) + 1.0 / (1.0 - rho));
            let mean_burst = count / bursts;
            assert!((mean_burst - burst).abs() <= 0.1 * burst, "mean burst {mean_burst}");
        }
    }

    #[test]
    fn loss_is_reproducible_and_direction_and_seed_dependent() {
        let c = LossConfig::Bernoulli { p: 0.1 };
        let a1 = loss_pattern(c, 42, Direction::AToB, 10_000);
        assert_eq!(a1, loss_pattern(c, 42, Direction::AToB, 10_000));
        assert_ne!(a1, loss_pattern(c, 43, Direction::AToB, 10_000));
        assert_ne!(a1, loss_pattern(c, 42, Direction::BToA, 10_000));
        let g = LossConfig::GilbertElliott { mean_loss: 0.05, mean_burst: 5.0 };
        assert_eq!(
            loss_pattern(g, 1, Direction::AToB, 10_000),
            loss_pattern(g, 1, Direction::AToB, 10_000)
        );
    }

    #[test]
    fn loss_validation() {
        assert!(LossConfig::Bernoulli { p: 1.5 }.validate().is_err());
        assert!(
            LossConfig::GilbertElliott { mean_loss: 0.01, mean_burst: 0.5 }.validate().is_err()
        );
        assert!(LossConfig::GilbertElliott { mean_loss: 0.9, mean_burst: 1.0 }.validate().is_err());
        assert!(
            LossConfig::GilbertElliott { mean_loss: 0.01, mean_burst: 10.0 }.validate().is_ok()
        );
    }

    #[test]
    fn bottleneck_serializes_and_drops_tail() {
        // 12 Mbit/s: 1500 bytes take 1 ms.
        let mut b = Bottleneck::new(12_000_000, QueueLimit::Bytes(3000));
        assert_eq!(b.tx_time_ns(1500), 1_000_000);
        assert_eq!(b.arrive(0, 1500), Some(1_000_000));
        assert_eq!(b.arrive(0, 1500), Some(2_000_000));
        assert_eq!(b.arrive(0, 1500), None, "third packet overflows a 3000-byte queue");
        assert_eq!(b.arrive(1_000_000, 1500), Some(3_000_000), "first one has left");
        // An idle link starts serializing at arrival.
        assert_eq!(b.arrive(10_000_000, 1500), Some(11_000_000));
        let mut p = Bottleneck::new(12_000_000, QueueLimit::Packets(1));
        assert_eq!(p.arrive(0, 100), Some(66_666));
        assert_eq!(p.arrive(1, 100), None);
        let mut tiny = Bottleneck::new(12_000_000, QueueLimit::Bytes(100));
        assert_eq!(tiny.arrive(0, 1500), Some(1_000_000), "an empty queue takes any packet");
        assert_eq!(tiny.arrive(0, 1500), None);
        let mut unlimited = Bottleneck::new(0, QueueLimit::Packets(1));
        assert_eq!(unlimited.arrive(5, 1500), Some(5));
        assert_eq!(unlimited.arrive(5, 1500), Some(5));
    }

    #[test]
    fn queue_overload_bounds_delay() {
        // Offer twice the rate for a long time: drops happen, and the queueing delay stays at
        // most queue/rate.
        let rate = 10_000_000;
        let queue = 30_000u64;
        let mut b = Bottleneck::new(rate, QueueLimit::Bytes(queue));
        let mut drops = 0;
        let max_wait = queue * 8 * 1_000_000_000 / rate;
        for i in 0..10_000u64 {
            let now = i * 600_000; // 1500 B every 0.6 ms = 20 Mbit/s
            match b.arrive(now, 1500) {
                None => drops += 1,
                Some(end) => assert!(end - now <= max_wait, "waited {}", end - now),
            }
        }
        assert!((4_000..6_000).contains(&drops), "drops {drops}");
    }

    #[test]
    fn default_queue_is_one_bdp_with_a_floor() {
        assert_eq!(
            default_queue_limit(1_000_000_000, 50_000_000, 50_000_000),
            QueueLimit::Bytes(12_500_000)
        );
        assert_eq!(
            default_queue_limit(1_000_000, 0, 0),
            QueueLimit::Bytes(MIN_DEFAULT_QUEUE_BYTES)
        );
    }

    #[test]
    fn jitter_never_reorders_unless_asked() {
        let config =
            DirectionConfig { delay_ns: 10_000_000, jitter_ns: 5_000_000, ..Default::default() };
        let mut s = Shaper::new(config.clone(), QueueLimit::Packets(100), 3, Direction::AToB);
        let mut last = 0;
        let mut min_d = u64::MAX;
        let mut max_d = 0;
        for i in 0..10_000u64 {
            let now = i * 10_000_000; // widely spaced: jitter shows fully
            let Verdict::Deliver { release_ns, out_of_order, .. } = s.on_packet(now, 100) else {
                panic!("dropped")
            };
            assert!(!out_of_order);
            assert!(release_ns >= last);
            last = release_ns;
            min_d = min_d.min(release_ns - now);
            max_d = max_d.max(release_ns - now);
        }
        assert!((5_000_000..5_100_000).contains(&min_d), "min {min_d}");
        assert!(max_d <= 15_000_000 && max_d > 14_900_000, "max {max_d}");
        // Closely spaced packets: still in order.
        let mut s = Shaper::new(config.clone(), QueueLimit::Packets(100), 3, Direction::AToB);
        let mut last = 0;
        for i in 0..10_000u64 {
            let Verdict::Deliver { release_ns, .. } = s.on_packet(i * 1000, 100) else { panic!() };
            assert!(release_ns >= last);
            last = release_ns;
        }
        // Asked to reorder: some releases go backwards.
        let config = DirectionConfig { jitter_reorders: true, ..config };
        let mut s = Shaper::new(config, QueueLimit::Packets(100), 3, Direction::AToB);
        let mut last = 0;
        let mut backwards = 0;
        for i in 0..10_000u64 {
            let Verdict::Deliver { release_ns, .. } = s.on_packet(i * 1000, 100) else { panic!() };
            if release_ns < last {
                backwards += 1;
            }
            last = last.max(release_ns);
        }
        assert!(backwards > 1000, "backwards {backwards}");
    }

    #[test]
    fn reorder_and_duplicate_shares() {
        let config = DirectionConfig {
            delay_ns: 1_000_000,
            reorder: 0.1,
            duplicate: 0.05,
            ..Default::default()
        };
        let mut s = Shaper::new(config, QueueLimit::Packets(10), 11, Direction::AToB);
        let n = 100_000u64;
        let (mut re, mut dup) = (0u64, 0u64);
        for i in 0..n {
            let Verdict::Deliver { reordered, duplicate, release_ns, out_of_order } =
                s.on_packet(i * 100_000, 100)
            else {
                panic!()
            };
            assert_eq!(reordered, out_of_order);
            if reordered {
                re += 1;
                assert_eq!(release_ns, i * 100_000 + 2_000_000);
            }
            dup += u64::from(duplicate);
        }
        let check = |count: u64, p: f64| {
            let sd = (n as f64 * p * (1.0 - p)).sqrt();
            assert!((count as f64 - n as f64 * p).abs() <= tolerance(sd), "{count} vs {p}");
        };
        check(re, 0.1);
        check(dup, 0.05);
    }

    #[test]
    fn the_black_hole_drops_only_longer_packets_and_leaves_the_loss_pattern_alone() {
        let bursty = LossConfig::GilbertElliott { mean_loss: 0.05, mean_burst: 4.0 };
        for loss in [LossConfig::Bernoulli { p: 0.1 }, bursty] {
            let holed =
                DirectionConfig { loss, black_hole_above_bytes: Some(1400), ..Default::default() };
            let plain = DirectionConfig { loss, ..Default::default() };
            let mut s = Shaper::new(holed, QueueLimit::Packets(1000), 7, Direction::AToB);
            let mut t = Shaper::new(plain, QueueLimit::Packets(1000), 7, Direction::AToB);
            let mut too_big = 0;
            for i in 0..10_000u64 {
                let size = if i % 3 == 0 { 1500 } else { 1400 };
                let now = i * 1_000_000;
                let (got, plain) = (s.on_packet(now, size), t.on_packet(now, size));
                if size > 1400 {
                    assert_eq!(got, Verdict::Drop(DropReason::TooBig), "{loss:?} packet {i}");
                    too_big += 1;
                } else {
                    // The same random fate as without the black hole: every arrival counts.
                    assert_eq!(got, plain, "{loss:?} packet {i}");
                }
            }
            assert_eq!(too_big, 3334);
        }
    }
}
