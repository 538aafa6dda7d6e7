//! What a channel measures about its path (UDT paper, section 3): round-trip time, packet
//! arrival speed, and link capacity from packet pairs.
//!
//! How they are driven:
//! - the receiver times each ACK against its ACK2 and feeds the result to
//!   [`RttEstimator::on_sample`]; the sender copies the receiver's figures, which every ACK
//!   carries, with [`RttEstimator::set`];
//! - for every data packet that arrives, the receiver calls [`ArrivalSpeed::on_arrival`] and
//!   exactly one of [`CapacityEstimator::on_pair_first`], [`CapacityEstimator::on_pair_second`]
//!   or [`CapacityEstimator::on_other_arrival`], according to the packet's pair flag; every ACK
//!   reports [`ArrivalSpeed::pkts_per_sec`] and [`CapacityEstimator::pkts_per_sec`].
//!
//! All three are pure: time comes in as `now_us`, state lives in fixed-size arrays, and no call
//! allocates. Times are whole microseconds, which bounds the resolution of the speed estimates
//! (see [`CapacityEstimator::pkts_per_sec`]).

/// How far back [`RttEstimator::min_rtt_us`] looks: 10 s.
pub const MIN_RTT_WINDOW_US: u64 = 10_000_000;
/// Largest RTT or RTT variance the [`RttEstimator`] accepts, about 71 minutes; larger inputs are
/// clamped to it, which keeps its fixed-point arithmetic far from overflow.
pub const MAX_RTT_US: u64 = u32::MAX as u64;
/// Number of inter-arrival intervals [`ArrivalSpeed`] filters over.
pub const ARRIVAL_WINDOW: usize = 64;
/// A capacity reading at or above this is the receiver's clock resolution (a pair or a train
/// whose packets arrived a microsecond or less apart: delivered together by an interrupt, a
/// receive batch or an emulator's late wake-up), not a measured link.
pub const UNRESOLVED_PPS: u32 = 1_000_000;
/// Number of pair intervals [`CapacityEstimator`] takes the median of.
pub const PAIR_WINDOW: usize = 16;
/// The sender sends every this-many-th data packet as the first of a packet pair (UDT's N = 16).
pub const PAIR_PERIOD_PKTS: u64 = 16;

/// Bytes of IPv4 and UDP header in front of a datagram on the wire, for scaling pair intervals
/// between packet sizes (over IPv6 it is 48: the ratio moves by a fraction of a percent).
const IP_UDP_HEADER_BYTES: u64 = 28;

/// The min-RTT window is kept in buckets this long.
const MIN_RTT_BUCKET_US: u64 = 1_000_000;
/// The window's buckets plus the one being filled, so that every sample of the last
/// `MIN_RTT_WINDOW_US` counts and none older than `MIN_RTT_WINDOW_US + MIN_RTT_BUCKET_US` does.
const MIN_RTT_BUCKETS: usize = (MIN_RTT_WINDOW_US / MIN_RTT_BUCKET_US) as usize + 1;

/// The smallest RTT sample taken in one bucket of time.
#[derive(Clone, Copy, Debug)]
struct MinBucket {
    /// `now_us / MIN_RTT_BUCKET_US` of the samples in this bucket.
    epoch: u64,
    min_us: u64,
}

/// Smoothed round-trip time and its variation, as UDT computes them, plus the minimum sample of
/// the last [`MIN_RTT_WINDOW_US`].
///
/// Each sample updates `rtt = 7/8 rtt + 1/8 sample` and `var = 3/4 var + 1/4 |sample - rtt|`
/// (the variation against the RTT before this sample); the first sample sets `rtt = sample` and
/// `var = sample / 2`. The state is kept in fixed point (8 x rtt, 4 x var), so the smoothed
/// values converge to a steady sample exactly instead of stalling a few microseconds off.
#[derive(Clone, Debug)]
pub struct RttEstimator {
    /// Smoothed RTT times 8.
    rtt_x8_us: u64,
    /// RTT variation times 4.
    var_x4_us: u64,
    /// Whether a sample or a peer's estimate has replaced the initial guess.
    measured: bool,
    /// Ring indexed by `epoch % MIN_RTT_BUCKETS`.
    min_buckets: [Option<MinBucket>; MIN_RTT_BUCKETS],
    /// Epoch of the newest sample; the window ends there.
    newest_epoch: Option<u64>,
}

impl RttEstimator {
    /// An estimator that reports `initial_rtt_us` (and half of it as variation) until the first
    /// sample, which replaces the guess outright. UDT starts from 100 ms.
    pub fn new(initial_rtt_us: u64) -> Self {
        let rtt_us = initial_rtt_us.min(MAX_RTT_US);
        Self {
            rtt_x8_us: rtt_us * 8,
            var_x4_us: rtt_us * 2,
            measured: false,
            min_buckets: [None; MIN_RTT_BUCKETS],
            newest_epoch: None,
        }
    }

    /// Takes one RTT measurement `sample_us`, made at `now_us`. A `now_us` earlier than a
    /// previous one counts as that previous time.
    pub fn on_sample(&mut self, sample_us: u64, now_us: u64) {
        let sample_us = sample_us.min(MAX_RTT_US);
        if self.measured {
            let deviation_us = self.rtt_us().abs_diff(sample_us);
            self.var_x4_us = self.var_x4_us - self.var_x4_us / 4 + deviation_us;
            self.rtt_x8_us = self.rtt_x8_us - self.rtt_x8_us / 8 + sample_us;
        } else {
            self.rtt_x8_us = sample_us * 8;
            self.var_x4_us = sample_us * 2;
            self.measured = true;
        }
        self.record_min(sample_us, now_us);
    }

    /// Replaces the smoothed values with the peer's (the sender adopts what the receiver reports
    /// in each ACK). It is not a sample: the minimum RTT does not see it. Later samples smooth
    /// from these values.
    pub fn set(&mut self, rtt_us: u64, var_us: u64) {
        self.rtt_x8_us = rtt_us.min(MAX_RTT_US) * 8;
        self.var_x4_us = var_us.min(MAX_RTT_US) * 4;
        self.measured = true;
    }

    /// The smoothed round-trip time.
    pub fn rtt_us(&self) -> u64 {
        // Truncating matches the update's truncation: a steady sample is reported exactly.
        self.rtt_x8_us / 8
    }

    /// The smoothed variation of the round-trip time.
    pub fn rtt_var_us(&self) -> u64 {
        self.var_x4_us / 4
    }

    /// The smallest sample of the last [`MIN_RTT_WINDOW_US`], counted back from the newest
    /// sample's `now_us` (not from the wall clock: with no new samples the value does not
    /// expire). Samples older than the window by less than one second may still count. `None`
    /// before the first sample.
    pub fn min_rtt_us(&self) -> Option<u64> {
        let newest = self.newest_epoch?;
        self.min_buckets
            .iter()
            .flatten()
            .filter(|b| b.epoch + MIN_RTT_BUCKETS as u64 > newest)
            .map(|b| b.min_us)
            .min()
    }

    fn record_min(&mut self, sample_us: u64, now_us: u64) {
        let epoch = (now_us / MIN_RTT_BUCKET_US).max(self.newest_epoch.unwrap_or(0));
        self.newest_epoch = Some(epoch);
        let slot = &mut self.min_buckets[(epoch % MIN_RTT_BUCKETS as u64) as usize];
        match slot {
            Some(b) if b.epoch == epoch => b.min_us = b.min_us.min(sample_us),
            // An empty slot, or one a whole window old: start the bucket afresh.
            _ => *slot = Some(MinBucket { epoch, min_us: sample_us }),
        }
    }
}

/// The last `N` intervals, in microseconds, in arrival order modulo rotation.
#[derive(Clone, Debug)]
struct Ring<const N: usize> {
    intervals_us: [u32; N],
    len: usize,
    next: usize,
}

impl<const N: usize> Ring<N> {
    const fn new() -> Self {
        Self { intervals_us: [0; N], len: 0, next: 0 }
    }

    /// Records `interval_us`, saturated to `u32::MAX` (71 minutes), over the oldest.
    fn push(&mut self, interval_us: u64) {
        self.intervals_us[self.next] = u32::try_from(interval_us).unwrap_or(u32::MAX);
        self.next = (self.next + 1) % N;
        self.len = (self.len + 1).min(N);
    }

    /// The recorded intervals, in no particular order.
    fn values(&self) -> &[u32] {
        &self.intervals_us[..self.len]
    }

    /// The upper median (element `len / 2` in sorted order), as UDT takes it; `None` if empty.
    fn median_us(&self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let mut scratch = self.intervals_us;
        let values = &mut scratch[..self.len];
        let (_, median, _) = values.select_nth_unstable(self.len / 2);
        Some(u64::from(*median))
    }
}

/// Packet arrival speed at the receiver, through UDT's median filter: over the last
/// [`ARRIVAL_WINDOW`] inter-arrival intervals, take the median, drop the intervals longer than
/// 8 x median or shorter than median / 8 (rounded down to whole microseconds), and average the
/// rest. An idle gap or a burst shows up
/// as a few outlying intervals and is filtered out, where a plain mean would be dragged along.
#[derive(Clone, Debug)]
pub struct ArrivalSpeed {
    intervals: Ring<ARRIVAL_WINDOW>,
    last_arrival_us: Option<u64>,
}

impl ArrivalSpeed {
    /// An estimator that has seen no packet.
    pub const fn new() -> Self {
        Self { intervals: Ring::new(), last_arrival_us: None }
    }

    /// Records a data packet's arrival at `now_us`. A `now_us` earlier than the previous arrival
    /// counts as an interval of zero.
    pub fn on_arrival(&mut self, now_us: u64) {
        if let Some(last_us) = self.last_arrival_us {
            self.intervals.push(now_us.saturating_sub(last_us));
        }
        self.last_arrival_us = Some(self.last_arrival_us.map_or(now_us, |l| l.max(now_us)));
    }

    /// Packets per second, or 0 while no more than half of [`ARRIVAL_WINDOW`] intervals
    /// (recorded ones or, after filtering, surviving ones) support an estimate. Saturates at
    /// `u32::MAX`. Costs one selection over the window; call it once per ACK, not per packet.
    pub fn pkts_per_sec(&self) -> u32 {
        let Some(median_us) = self.intervals.median_us() else {
            return 0;
        };
        // Whole-microsecond timestamps at high rates give intervals of 0 and 1 us: the rounded
        // bounds keep both (median 1 admits 0, median 0 admits up to 8 us), so the average stays
        // near the true rate instead of going to zero or infinity.
        let upper_us = median_us.max(1) * 8;
        let (count, sum_us) = self
            .intervals
            .values()
            .iter()
            .map(|&i| u64::from(i))
            .filter(|&i| i >= median_us / 8 && i <= upper_us)
            .fold((0u64, 0u64), |(n, sum), i| (n + 1, sum + i));
        if count <= (ARRIVAL_WINDOW / 2) as u64 {
            return 0;
        }
        per_second(count, sum_us)
    }
}

impl Default for ArrivalSpeed {
    fn default() -> Self {
        Self::new()
    }
}

/// How far back [`DeliveryRate`] counts: packets delivered over at least this much arrival time.
pub const DELIVERY_WINDOW_US: u64 = 40_000;
/// Marks [`DeliveryRate`] keeps (one per ACK, so 160 ms at one ACK per 10 ms).
const DELIVERY_MARKS: usize = 16;
/// A window shorter than this gives no estimate (too few packets to tell a rate from a burst).
const DELIVERY_MIN_SPAN_US: u64 = 5_000;

/// Packets delivered per second over the last [`DELIVERY_WINDOW_US`] or more: the count of
/// packets that arrived between two arrival instants, over the time between them.
///
/// [`ArrivalSpeed`] reads the speed from individual inter-arrival intervals, which a bottleneck
/// that delivers in bunches (an emulator or NIC waking every few hundred microseconds and
/// handing over what queued meanwhile) turns into nonsense: a 1 Gbit/s link read as 2 to 4
/// Gbit/s on our emulated paths. Counted over tens of milliseconds, a bunch shifts the result by
/// its own length over the window's (1 % for 0.4 ms in 40 ms). Idle time inside the window
/// counts: this is what got through, not the speed of the packets while they flowed.
#[derive(Clone, Debug)]
pub struct DeliveryRate {
    /// (arrival time of the newest packet, packets counted) at each of the last marks, oldest
    /// first after rotation.
    marks: [(u64, u64); DELIVERY_MARKS],
    len: usize,
    next: usize,
    count: u64,
    last_arrival_us: Option<u64>,
}

impl DeliveryRate {
    /// An estimator that has seen no packet.
    pub const fn new() -> Self {
        Self { marks: [(0, 0); DELIVERY_MARKS], len: 0, next: 0, count: 0, last_arrival_us: None }
    }

    /// A data packet arrived at `now_us` (an earlier time than the previous one counts as that).
    pub fn on_arrival(&mut self, now_us: u64) {
        self.count += 1;
        self.last_arrival_us = Some(self.last_arrival_us.map_or(now_us, |l| l.max(now_us)));
    }

    /// Closes an interval (call once per ACK) and returns packets per second over the newest
    /// window of at least [`DELIVERY_WINDOW_US`] that the kept marks cover (or the longest they
    /// cover); 0 while that is shorter than 5 ms. Saturates at `u32::MAX`.
    pub fn pkts_per_sec(&mut self) -> u32 {
        let Some(newest_us) = self.last_arrival_us else { return 0 };
        let newest = (newest_us, self.count);
        let previous = (self.next + DELIVERY_MARKS - 1) % DELIVERY_MARKS;
        if self.len == 0 || self.marks[previous].1 != self.count {
            self.marks[self.next] = newest;
            self.next = (self.next + 1) % DELIVERY_MARKS;
            self.len = (self.len + 1).min(DELIVERY_MARKS);
        }
        // Newest first: the first mark at least a window back, else the oldest kept.
        let mut from = newest;
        for back in 1..self.len {
            from = self.marks[(self.next + DELIVERY_MARKS - 1 - back) % DELIVERY_MARKS];
            if newest_us.saturating_sub(from.0) >= DELIVERY_WINDOW_US {
                break;
            }
        }
        let span_us = newest_us.saturating_sub(from.0);
        if span_us < DELIVERY_MIN_SPAN_US {
            return 0;
        }
        per_second(self.count - from.1, span_us)
    }
}

impl Default for DeliveryRate {
    fn default() -> Self {
        Self::new()
    }
}

/// Link capacity by receiver-based packet pairs and, in startup, packet trains.
///
/// Every [`PAIR_PERIOD_PKTS`]-th packet the sender sends two packets back to back, flagged
/// `PAIR_FIRST` and `PAIR_SECOND`; the bottleneck link spreads them apart by one packet's
/// transmission time, which the receiver measures. The pair counts only if nothing else arrived
/// between its two packets.
///
/// A receive path that hands packets over in bunches (interrupt coalescing, GRO, an emulator
/// thread that wakes every 50-1000 us) delivers a pair in one bunch or across two, and the pair
/// reads the receiver's clock resolution or a fraction of the link: it cannot resolve 12 us
/// with a granularity of 200. While a controller probes for the link (startup), the sender
/// therefore sends trains: a `PAIR_FIRST`, middles flagged [`crate::wire::flags::TRAIN`], and a
/// `PAIR_SECOND`, all back to back, spanning milliseconds at the bottleneck. The receiver groups
/// a train's arrivals into bunches (arrivals within 1 µs of each other) and times the packets of
/// the bunches between the first and the last: each was released after the link had delivered
/// it, so from the first bunch's release to the last middle one's the link was busy with them
/// (exact on a precise path, where every packet is a bunch; within a packet under bunching). A
/// train in one or two bunches has no middle: it is timed as `(span + widest gap) / n`, which
/// never reads much faster than the link; in one bunch (no gap) it reads the clock resolution,
/// as an unresolved pair does. A pair is a train of two. For a while after a train (the
/// receiver says how long: a couple of round trips, as trains come once per round trip), the
/// estimate is that train's: the pairs in between are what bunching does not let resolve. Once
/// trains stop (startup is over), the pairs' reading comes back, and with it the controller's
/// judgement of whether the pairs can be trusted.
#[derive(Clone, Debug)]
pub struct CapacityEstimator {
    intervals: Ring<PAIR_WINDOW>,
    /// The pair or train in progress since its `PAIR_FIRST` (a pair while it has one packet).
    train: Option<Train>,
    /// The per-packet interval of the latest complete train in nanoseconds, scaled to
    /// full-size packets.
    train_interval_ns: Option<u64>,
    /// When the latest train completed.
    train_at_us: u64,
}

#[derive(Clone, Copy, Debug)]
struct Train {
    first_us: u64,
    pkts: u64,
    last_us: u64,
    widest_gap_us: u64,
    /// Packets of the bunch the last arrival belongs to.
    bunch_pkts: u64,
    /// The last arrival of the train's first bunch, once a second began.
    first_bunch_end_us: Option<u64>,
    /// Packets of the bunches after the first that are complete, and the last arrival of the
    /// latest of them.
    middle_pkts: u64,
    middle_end_us: u64,
    /// The gap before the bunch in progress, and the gaps before the complete middle ones:
    /// how many, their sum and the widest (see [`Train::interval_ns`]).
    pending_gap_us: u64,
    middle_gaps: u64,
    middle_gaps_us: u64,
    widest_middle_gap_us: u64,
}

/// Arrivals this close belong to one bunch (one release by the receive path): whole
/// microseconds, and a host that stamps a batch packet by packet.
const BUNCH_GAP_US: u64 = 1;
/// A gap between a train's middle bunches this many times the others' mean is a stall of the
/// sender (or of the path before the bottleneck), not the link's pace (see
/// [`Train::interval_ns`]).
const STALL_GAP_FACTOR: u64 = 4;

impl Train {
    fn new(now_us: u64) -> Self {
        Train {
            first_us: now_us,
            pkts: 1,
            last_us: now_us,
            widest_gap_us: 0,
            bunch_pkts: 1,
            first_bunch_end_us: None,
            middle_pkts: 0,
            middle_end_us: now_us,
            pending_gap_us: 0,
            middle_gaps: 0,
            middle_gaps_us: 0,
            widest_middle_gap_us: 0,
        }
    }

    fn on_arrival(&mut self, now_us: u64) {
        let gap_us = now_us.saturating_sub(self.last_us);
        if gap_us > BUNCH_GAP_US {
            match self.first_bunch_end_us {
                None => self.first_bunch_end_us = Some(self.last_us),
                Some(_) => {
                    self.middle_pkts += self.bunch_pkts;
                    self.middle_end_us = self.last_us;
                    self.middle_gaps += 1;
                    self.middle_gaps_us += self.pending_gap_us;
                    self.widest_middle_gap_us = self.widest_middle_gap_us.max(self.pending_gap_us);
                }
            }
            self.pending_gap_us = gap_us;
            self.bunch_pkts = 0;
        }
        self.widest_gap_us = self.widest_gap_us.max(gap_us);
        self.bunch_pkts += 1;
        self.pkts += 1;
        self.last_us = now_us;
    }

    /// Nanoseconds per packet. The packets of the bunches between the first and the last
    /// arrived at the bottleneck's pace, each bunch after the one before it was released:
    /// they took the time from the first bunch's release to the latest's (exact on a precise
    /// path, where each packet is a bunch; within a packet or so under bunching). A train in
    /// one or two bunches has none: its span and its widest gap bound the time from above.
    ///
    /// One gap among the middle ones [`STALL_GAP_FACTOR`] times the mean of the others (at
    /// least three) is a stall before the bottleneck (a sender or host descheduled mid-train,
    /// say), the link idle meanwhile. It counts as a gap of that mean. Through `linkem` at
    /// 100 ms one train of 256 packets read 53k packets a second on an 86k link (about 1.7 ms
    /// more than its 3 ms), and startup held at 95 % of that: a 128 MiB copy took 2.2 s where
    /// its neighbours took 1.65.
    fn interval_ns(&self) -> u64 {
        match self.first_bunch_end_us {
            Some(first_end_us) if self.middle_pkts > 0 => {
                let mut span_us = self.middle_end_us.saturating_sub(first_end_us);
                if self.middle_gaps >= 4 {
                    let others = self.middle_gaps - 1;
                    let others_us = self.middle_gaps_us - self.widest_middle_gap_us;
                    if self.widest_middle_gap_us * others > STALL_GAP_FACTOR * others_us {
                        // Saturating: arrival stamps that step back (a stamp of another
                        // source, a reordered batch) can leave a gap wider than the span.
                        // The train then reads as unresolved (0 here), never as a wrapped
                        // span of centuries.
                        let stall_us = self.widest_middle_gap_us - others_us / others;
                        span_us = span_us.saturating_sub(stall_us);
                    }
                }
                span_us * 1000 / self.middle_pkts
            }
            _ => {
                let span_us = self.last_us.saturating_sub(self.first_us);
                (span_us + self.widest_gap_us) * 1000 / self.pkts
            }
        }
    }
}

impl CapacityEstimator {
    /// An estimator that has seen no pair.
    pub const fn new() -> Self {
        Self { intervals: Ring::new(), train: None, train_interval_ns: None, train_at_us: 0 }
    }

    /// A `PAIR_FIRST` packet arrived at `now_us`; it replaces any first still unpaired.
    pub fn on_pair_first(&mut self, now_us: u64) {
        self.train = Some(Train::new(now_us));
    }

    /// A train's middle packet arrived at `now_us`; without a train in progress it is ignored.
    pub fn on_train_middle(&mut self, now_us: u64) {
        if let Some(train) = &mut self.train {
            train.on_arrival(now_us);
        }
    }

    /// A `PAIR_SECOND` packet arrived at `now_us`. It completes a pair only if the packet before
    /// it was a `PAIR_FIRST`; otherwise it is ignored.
    pub fn on_pair_second(&mut self, now_us: u64) {
        self.on_pair_second_sized(now_us, 1, 1);
    }

    /// [`CapacityEstimator::on_pair_second`] for a second packet of `datagram_bytes` on a channel
    /// whose full-size datagrams are `full_bytes`: the bottleneck spread the pair by the second
    /// packet's transmission time, so the interval is scaled to what a full-size packet would
    /// take (headers of IPv4 and UDP counted), and the estimate stays in full-size packets per
    /// second while a channel sends smaller ones (`crate::pmtu`: data starts at the base size).
    /// After a train's middles it completes the train instead.
    pub fn on_pair_second_sized(&mut self, now_us: u64, datagram_bytes: usize, full_bytes: usize) {
        let wire = |bytes: usize| bytes as u64 + IP_UDP_HEADER_BYTES;
        let scale = |interval_us: u64| interval_us * wire(full_bytes) / wire(datagram_bytes).max(1);
        match self.train.take() {
            Some(pair) if pair.pkts == 1 => {
                self.intervals.push(scale(now_us.saturating_sub(pair.first_us)));
            }
            Some(mut train) => {
                train.on_arrival(now_us);
                // In nanoseconds: one full-size packet's interval may be under 1 us.
                self.train_interval_ns = Some(scale(train.interval_ns()));
                self.train_at_us = now_us;
            }
            None => {}
        }
    }

    /// Any other data packet arrived: it breaks a pair or train in progress.
    pub fn on_other_arrival(&mut self) {
        self.train = None;
    }

    /// Packets per second the bottleneck carries: one second over the median of the last
    /// [`PAIR_WINDOW`] pair intervals, or over the latest train's interval for `fresh_us` after
    /// it arrived; 0 before the first pair. An interval of 0 counts as 1 us, so
    /// whole-microsecond timestamps cap the estimate at 1,000,000 packets per second.
    pub fn pkts_per_sec(&self, now_us: u64, fresh_us: u64) -> u32 {
        match self.train_interval_ns {
            Some(interval_ns) if now_us < self.train_at_us + fresh_us => {
                if interval_ns < 1000 {
                    UNRESOLVED_PPS
                } else {
                    u32::try_from(1_000_000_000 / interval_ns).unwrap_or(u32::MAX)
                }
            }
            _ => self.intervals.median_us().map_or(0, |median_us| per_second(1, median_us)),
        }
    }
}

impl Default for CapacityEstimator {
    fn default() -> Self {
        Self::new()
    }
}

/// `count` packets in `elapsed_us` (at least 1 us) as packets per second, saturating.
fn per_second(count: u64, elapsed_us: u64) -> u32 {
    let pps = u128::from(count) * 1_000_000 / u128::from(elapsed_us.max(1));
    u32::try_from(pps).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
