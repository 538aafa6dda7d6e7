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
//! 5. optional duplication (a copy is released right after the original);
//! 6. the receive side's timing: with `release_granularity_ns`, the packet is released at the
//!    first receive-side wake at or after its time ([`wake_at_or_after`]), wakes falling at
//!    multiples of the granularity, each late by up to `release_wake_jitter_ns`; then, with
//!    `gro_batch`, packets are held in GRO-like batches ([`GroBatch`], applied by the emulator as
//!    packets come due, since a batch's end depends on the packets after it).
//!
//! Steps 0-6 except the GRO batch are decided when the packet arrives ([`Shaper::on_packet`]).

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
    WakeJitter = 6,
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
    /// The receive side's wake period, in nanoseconds: a packet is released only at the first
    /// wake at or after its time, wakes falling at multiples of this from the emulator's start,
    /// so packets reach the receiving namespace in bunches (NIC interrupt coalescing, a virtual
    /// NIC, an emulator thread that wakes periodically). On the return path of a transfer this
    /// is ACK compression. 0: released at their own time.
    pub release_granularity_ns: u64,
    /// Each receive-side wake is late by a random amount uniform in `[0, this]` nanoseconds; at
    /// most `release_granularity_ns`, so the wakes stay in order.
    pub release_wake_jitter_ns: u64,
    /// GRO-like batching: packets due for release are held until this many are held or
    /// `gro_window_ns` after the first of them, then released together (at most
    /// [`MAX_GRO_BATCH`]). 0 or 1: off.
    pub gro_batch: u32,
    /// The longest a GRO-like batch waits for more packets, in nanoseconds.
    pub gro_window_ns: u64,
}

/// The largest GRO-like batch (Linux's GRO merges at most 64 segments).
pub const MAX_GRO_BATCH: u32 = 64;

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
            release_granularity_ns: 0,
            release_wake_jitter_ns: 0,
            gro_batch: 0,
            gro_window_ns: 100_000,
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
        if self.release_wake_jitter_ns > self.release_granularity_ns {
            return Err(format!(
                "release wake jitter {} ns is above the release granularity {} ns",
                self.release_wake_jitter_ns, self.release_granularity_ns
            ));
        }
        if self.gro_batch > MAX_GRO_BATCH {
            return Err(format!("GRO batch {} is above {MAX_GRO_BATCH}", self.gro_batch));
        }
        if self.gro_batch > 1 && self.gro_window_ns == 0 {
            return Err("a GRO batch needs a window above 0".into());
        }
        match self.queue {
            Some(QueueLimit::Bytes(0)) | Some(QueueLimit::Packets(0)) => {
                Err("queue limit must be above 0".into())
            }
            _ => Ok(()),
        }
    }

    /// The GRO-like batch of this direction, if on.
    pub fn gro(&self) -> Option<GroBatch> {
        (self.gro_batch > 1).then(|| GroBatch::new(self.gro_batch, self.gro_window_ns))
    }
}

/// The first receive-side wake at or after `t_ns` (`t_ns` itself when `granularity_ns` is 0).
///
/// Wake `k` falls at `k * granularity_ns + j(k)`, with `j(k)` uniform in `[0, jitter_ns]` and a
/// function of the seed, the direction and `k` alone. With `jitter_ns <= granularity_ns` the
/// wakes are in order, so the function never decreases: release order is kept.
pub fn wake_at_or_after(
    t_ns: u64,
    granularity_ns: u64,
    jitter_ns: u64,
    seed: u64,
    direction: Direction,
) -> u64 {
    if granularity_ns == 0 {
        return t_ns;
    }
    let jitter = |k: u64| match jitter_ns {
        0 => 0,
        j => {
            let stream = direction.stream_base() + Stream::WakeJitter as u64;
            (random_unit(seed, stream, k) * (j + 1) as f64) as u64
        }
    };
    // Every wake before this one falls before `t_ns - jitter_ns`, so before `t_ns`.
    let mut k = t_ns.saturating_sub(jitter_ns).div_ceil(granularity_ns);
    loop {
        let wake = k * granularity_ns + jitter(k);
        if wake >= t_ns {
            return wake;
        }
        k += 1;
    }
}

/// GRO-like batching on the receive side: packets due for release (presented in the order of
/// their due times) are held until `max_pkts` are held, or until `window_ns` after the first of
/// them, then released together, as GRO or a NIC that raises one interrupt per batch does.
///
/// A packet due at `due`: if the open batch's window ended at or before `due`
/// ([`GroBatch::expired_by`]) that batch is released first (at its deadline); then the packet
/// joins, and if that fills the batch ([`GroBatch::add`] returns true) the batch is released at
/// `due`. A batch nobody fills is released at [`GroBatch::deadline_ns`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroBatch {
    max_pkts: u32,
    window_ns: u64,
    held: u32,
    first_ns: u64,
}

impl GroBatch {
    /// An empty batch of up to `max_pkts` packets (at least 1) waiting at most `window_ns`.
    pub fn new(max_pkts: u32, window_ns: u64) -> Self {
        GroBatch { max_pkts: max_pkts.max(1), window_ns, held: 0, first_ns: 0 }
    }

    /// Packets held now.
    pub fn held(&self) -> u32 {
        self.held
    }

    /// When the open batch must be released if it does not fill; `None` when empty.
    pub fn deadline_ns(&self) -> Option<u64> {
        (self.held > 0).then(|| self.first_ns + self.window_ns)
    }

    /// Whether the open batch's window has ended by `t_ns` (it must be released before anything
    /// due at `t_ns` joins).
    pub fn expired_by(&self, t_ns: u64) -> bool {
        self.deadline_ns().is_some_and(|d| d <= t_ns)
    }

    /// A packet due at `due_ns` joins; true when that fills the batch: release it now.
    pub fn add(&mut self, due_ns: u64) -> bool {
        if self.held == 0 {
            self.first_ns = due_ns;
        }
        self.held += 1;
        self.held >= self.max_pkts
    }

    /// The batch was released: empty it.
    pub fn clear(&mut self) {
        self.held = 0;
    }
}

/// The release time of each packet due at `due_ns` (in order) under [`GroBatch`] batching, with
/// the emulator's rule: a batch goes when full, or at its deadline. For tests and tools.
pub fn gro_release_times(due_ns: &[u64], max_pkts: u32, window_ns: u64) -> Vec<u64> {
    let mut gro = GroBatch::new(max_pkts, window_ns);
    let mut out = Vec::with_capacity(due_ns.len());
    // `out[open..]` are the packets in the open batch, released together once it goes.
    let mut open = 0;
    for &due in due_ns {
        if let Some(deadline) = gro.deadline_ns().filter(|_| gro.expired_by(due)) {
            out[open..].fill(deadline);
            gro.clear();
            open = out.len();
        }
        out.push(due);
        if gro.add(due) {
            out[open..].fill(due);
            gro.clear();
            open = out.len();
        }
    }
    if let Some(deadline) = gro.deadline_ns() {
        out[open..].fill(deadline);
    }
    out
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
        /// How long it waited in the bottleneck's queue before its serialization began.
        queued_ns: u64,
    },
}

/// The complete, deterministic decision logic of one direction.
#[derive(Debug, Clone)]
pub struct Shaper {
    config: DirectionConfig,
    seed: u64,
    stream_base: u64,
    direction: Direction,
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
            direction,
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
        let queued_ns = tx_end.saturating_sub(self.bottleneck.tx_time_ns(size) + now_ns);
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
            out_of_order = false;
        }
        // Monotone, so it keeps the order of the in-order packets.
        let release = wake_at_or_after(
            release,
            c.release_granularity_ns,
            c.release_wake_jitter_ns,
            self.seed,
            self.direction,
        );
        if !out_of_order {
            self.last_in_order_release_ns = release;
        }
        Verdict::Deliver { release_ns: release, out_of_order, reordered, duplicate, queued_ns }
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
    fn a_delivered_packet_says_how_long_it_waited_in_the_queue() {
        // 1 Gbit/s: 1250 B take 10 us. Three at once, then one after the queue has drained.
        let config = DirectionConfig { rate_bps: 1_000_000_000, ..Default::default() };
        let mut s = Shaper::new(config, QueueLimit::Packets(10), 1, Direction::AToB);
        let queued = |v| match v {
            Verdict::Deliver { queued_ns, .. } => queued_ns,
            Verdict::Drop(why) => panic!("dropped: {why:?}"),
        };
        assert_eq!(queued(s.on_packet(0, 1250)), 0);
        assert_eq!(queued(s.on_packet(0, 1250)), 10_000);
        assert_eq!(queued(s.on_packet(5_000, 1250)), 15_000);
        assert_eq!(queued(s.on_packet(100_000, 1250)), 0);
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
            let Verdict::Deliver { reordered, duplicate, release_ns, out_of_order, .. } =
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

    /// Releases of `n` packets of 1500 bytes arriving back to back at 1 Gbit/s (one every 12 us)
    /// through a 1 Gbit/s, 1 ms link with `config`'s receive-side timing.
    fn releases(config: DirectionConfig, seed: u64, direction: Direction, n: u64) -> Vec<u64> {
        let config = DirectionConfig { rate_bps: 1_000_000_000, delay_ns: 1_000_000, ..config };
        let mut s = Shaper::new(config, QueueLimit::Packets(1000), seed, direction);
        (0..n)
            .map(|i| match s.on_packet(i * 12_000, 1500) {
                Verdict::Deliver { release_ns, .. } => release_ns,
                v => panic!("packet {i}: {v:?}"),
            })
            .collect()
    }

    #[test]
    fn release_granularity_hands_packets_over_at_wakes_only() {
        let plain = releases(DirectionConfig::default(), 5, Direction::AToB, 10_000);
        for g in [20_000u64, 50_000, 200_000, 1_000_000] {
            let config = DirectionConfig { release_granularity_ns: g, ..Default::default() };
            let got = releases(config, 5, Direction::AToB, 10_000);
            for (i, (&r, &p)) in got.iter().zip(&plain).enumerate() {
                // The first wake at or after the packet's own time.
                assert_eq!(r % g, 0, "granularity {g}: packet {i} at {r}");
                assert!(r >= p && r < p + g, "granularity {g}: packet {i}: {r} vs {p}");
            }
            assert!(got.windows(2).all(|w| w[0] <= w[1]), "order kept");
            // Packets come 12 us apart: a wake hands over g / 12 us of them at once.
            let wakes = got.windows(2).filter(|w| w[0] != w[1]).count() + 1;
            let per_wake = got.len() as f64 / wakes as f64;
            println!("granularity {g} ns: {per_wake:.1} packets per wake");
            assert!((per_wake - g as f64 / 12_000.0).abs() < 1.0, "{per_wake} per wake");
        }
    }

    #[test]
    fn release_wake_jitter_is_seeded_bounded_and_keeps_order() {
        let (g, j) = (200_000u64, 150_000u64);
        let config = DirectionConfig {
            release_granularity_ns: g,
            release_wake_jitter_ns: j,
            ..Default::default()
        };
        let plain = releases(DirectionConfig::default(), 9, Direction::AToB, 20_000);
        let got = releases(config.clone(), 9, Direction::AToB, 20_000);
        assert_eq!(got, releases(config.clone(), 9, Direction::AToB, 20_000), "seeded");
        assert_ne!(got, releases(config.clone(), 10, Direction::AToB, 20_000));
        assert_ne!(got, releases(config, 9, Direction::BToA, 20_000));
        assert!(got.windows(2).all(|w| w[0] <= w[1]), "order kept");
        let mut lateness = Vec::new();
        for (&r, &p) in got.iter().zip(&plain) {
            assert!(r >= p && r < p + g + j, "{r} vs {p}");
            assert!(r % g <= j, "a wake falls within the jitter after a multiple: {r}");
            lateness.push(r % g);
        }
        let (lo, hi) = (lateness.iter().min().unwrap(), lateness.iter().max().unwrap());
        println!("wake offsets {lo}..{hi} ns");
        assert!(*lo < j / 10 && *hi > j * 9 / 10, "the jitter spans its range");
        // The pure function directly: identity without a granularity, and at a wake itself.
        assert_eq!(wake_at_or_after(12_345, 0, 0, 1, Direction::AToB), 12_345);
        assert_eq!(wake_at_or_after(400_000, 200_000, 0, 1, Direction::AToB), 400_000);
        assert_eq!(wake_at_or_after(400_001, 200_000, 0, 1, Direction::AToB), 600_000);
        assert_eq!(wake_at_or_after(0, 200_000, 0, 1, Direction::AToB), 0);
    }

    #[test]
    fn gro_batch_releases_when_full_or_at_the_window() {
        // Dues 12 us apart, batches of 8 with a long window: every 8th packet releases its batch.
        let dues: Vec<u64> = (0..100).map(|i| 1_000_000 + i * 12_000).collect();
        let got = gro_release_times(&dues, 8, 1_000_000);
        for (i, &r) in got.iter().enumerate().take(96) {
            assert_eq!(r, dues[i / 8 * 8 + 7], "packet {i}");
        }
        // The last 4 never fill a batch: released at the window after the first of them.
        assert!(got[96..].iter().all(|&r| r == dues[96] + 1_000_000));
        // A window of 50 us with batches of up to 64: five packets (0, 12, .., 48 us) per batch.
        let got = gro_release_times(&dues, 64, 50_000);
        for (i, &r) in got.iter().enumerate() {
            let first = i / 5 * 5;
            assert_eq!(r, dues[first] + 50_000, "packet {i}");
            assert!(r >= dues[i]);
        }
        // Sparse packets (200 us apart) each wait out the window alone.
        let sparse: Vec<u64> = (0..10).map(|i| i * 200_000).collect();
        let got = gro_release_times(&sparse, 8, 30_000);
        assert_eq!(got, sparse.iter().map(|d| d + 30_000).collect::<Vec<_>>());
        // The stateful form the emulator drives.
        let mut gro = GroBatch::new(3, 100);
        assert_eq!(gro.deadline_ns(), None);
        assert!(!gro.add(10));
        assert_eq!((gro.held(), gro.deadline_ns()), (1, Some(110)));
        assert!(!gro.expired_by(109) && gro.expired_by(110));
        assert!(!gro.add(20));
        assert!(gro.add(30), "the third fills it");
        gro.clear();
        assert_eq!((gro.held(), gro.deadline_ns()), (0, None));
        assert!(DirectionConfig { gro_batch: 1, ..Default::default() }.gro().is_none());
        assert!(DirectionConfig { gro_batch: 2, ..Default::default() }.gro().is_some());
    }

    #[test]
    fn receive_timing_validation() {
        let ok = DirectionConfig {
            release_granularity_ns: 50_000,
            release_wake_jitter_ns: 50_000,
            gro_batch: 64,
            ..Default::default()
        };
        assert!(ok.validate().is_ok());
        let bad = [
            DirectionConfig { release_wake_jitter_ns: 1, ..Default::default() },
            DirectionConfig { gro_batch: 65, ..Default::default() },
            DirectionConfig { gro_batch: 8, gro_window_ns: 0, ..Default::default() },
        ];
        for c in bad {
            assert!(c.validate().is_err(), "{c:?}");
        }
    }

    #[test]
    fn reordering_jitter_with_a_granularity_still_lands_on_wakes() {
        let config = DirectionConfig {
            jitter_ns: 300_000,
            jitter_reorders: true,
            release_granularity_ns: 50_000,
            ..Default::default()
        };
        let got = releases(config, 4, Direction::AToB, 10_000);
        assert!(got.iter().all(|r| r % 50_000 == 0));
        let backwards = got.windows(2).filter(|w| w[1] < w[0]).count();
        println!("released before an earlier packet: {backwards}");
        assert!(backwards > 1000, "jitter that may reorder still reorders: {backwards}");
        // Without reordering the same jitter keeps the order.
        let config = DirectionConfig {
            jitter_ns: 300_000,
            release_granularity_ns: 50_000,
            ..Default::default()
        };
        let got = releases(config, 4, Direction::AToB, 10_000);
        assert!(got.windows(2).all(|w| w[0] <= w[1]));
    }
}
