//! Plain configuration structs for the network, a link direction and a flow.

use serde::{Deserialize, Serialize};

use crate::loss::LossModel;

/// Bytes of IPv4 (20) and UDP (8) headers that every datagram costs on a link, on top of its own
/// length: the rate limit, the queue limit and the link byte counters all include them.
pub const WIRE_OVERHEAD_BYTES: u64 = 28;

/// The queue limit of a link built with [`LinkConfig::default`]: 1 MiB.
pub const DEFAULT_QUEUE_LIMIT_BYTES: u64 = 1 << 20;

/// The whole simulated network: one seed for all randomness and the two shared link directions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    /// Seeds every random decision; the same seed and config give bit-identical runs.
    pub seed: u64,
    /// The shared link that carries every flow's `a -> b` packets (the data direction).
    pub forward: LinkConfig,
    /// The shared link that carries every flow's `b -> a` packets (the acknowledgement direction).
    pub reverse: LinkConfig,
}

impl SimConfig {
    /// The same link config in both directions.
    pub fn symmetric(seed: u64, link: LinkConfig) -> Self {
        Self { seed, forward: link.clone(), reverse: link }
    }
}

/// One direction of the shared link.
///
/// A packet entering the link goes through, in order:
/// 1. the drop-tail queue in front of the rate limiter (dropped if it would not fit);
/// 2. serialization at `rate_bps`;
/// 3. the wire: blackout windows, then random loss (so a lost packet has consumed capacity),
///    then corruption and duplication;
/// 4. propagation (`delay_us`, plus `jitter_us` that never reorders unless `jitter_reorders`,
///    plus the reordering hold-back for the few packets chosen for it);
/// 5. receive stalls: what would arrive during a stall arrives, in order, when it ends;
/// 6. the receive side's timing (see "Timing noise" below): the hand-over to the receiver at the
///    next wake (`release_granularity_us`, `release_wake_jitter_us`), then GRO-like batching
///    (`gro_batch_pkts`, `gro_window_us`);
/// 7. the flow's own extra delay ([`FlowConfig`]), then the receiving endpoint.
///
/// # Timing noise
///
/// Real hosts do not hand packets over the moment they arrive, nor wake exactly when asked:
/// NIC interrupt coalescing, GRO, virtual NICs and emulator threads deliver arrivals in bunches
/// (a packet-pair or arrival-speed estimate then reads many times the link), feedback comes back
/// compressed, and a virtualized clock's sleeps overshoot. The fields below model these; all are
/// off by default (and then leave a run bit-identical to one without them), all are drawn from
/// the seed.
/// - `release_granularity_us` = G: the receiving side wakes at multiples of G (each wake late by
///   up to `release_wake_jitter_us`), and hands over everything that arrived since the previous
///   wake, together. On the reverse link (feedback to the data source) this is ACK compression.
/// - `gro_batch_pkts` = N, `gro_window_us` = W: packets for one receiving endpoint are held until
///   N are held, or W after the first of them, then handed over together (as GRO, or a NIC that
///   raises one interrupt per N packets or W us).
/// - `jitter_reorders`: `jitter_us` is each packet's own, so packets may pass one another.
/// - `sender_wake_late_us` = X: timer wake-ups of the endpoints that send into this link fire
///   late by a random amount uniform in `[0, X]` (a host whose sleeps overshoot). Deliveries and
///   wake-ups for something already due are not delayed.
///
/// The default is an ideal link: unlimited rate, no delay, no loss, on-time hand-over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkConfig {
    /// Bottleneck rate in bits per second of wire bytes; 0 means unlimited (no queue at all).
    pub rate_bps: u64,
    /// Drop-tail limit on the bytes (wire bytes) waiting or being serialized; a packet that would
    /// take the queue above it is dropped. Only meaningful when `rate_bps > 0`.
    pub queue_limit_bytes: u64,
    /// One-way propagation delay.
    pub delay_us: u64,
    /// Extra delay drawn uniformly in `[0, jitter_us]` per packet; it never lets a packet leave
    /// before the one sent ahead of it on this link.
    pub jitter_us: u64,
    /// Random loss on the wire.
    pub loss: LossModel,
    /// Probability that a packet is held back by `reorder_extra_delay_us` so later ones pass it.
    pub reorder_prob: f64,
    /// How long a packet chosen for reordering is held back.
    pub reorder_extra_delay_us: u64,
    /// Probability that a second copy of a packet is delivered right after it.
    pub duplicate_prob: f64,
    /// Probability that one random bit of a packet is flipped.
    pub corrupt_prob: f64,
    /// Windows `[start_us, end_us)` during which every packet leaving the queue is lost.
    pub blackouts: Vec<(u64, u64)>,
    /// Periodic stalls at the far end, `(every_us, length_us)`: packets due in the first
    /// `length_us` of each `every_us` arrive together at its end, as from a host or emulator
    /// that was not scheduled for that long. Nothing is lost; the delivery pauses, then bunches.
    #[serde(default)]
    pub stalls: Option<(u64, u64)>,
    /// Let `jitter_us` reorder: each packet's extra delay is its own, so a packet may arrive
    /// before one sent ahead of it. Off: jitter never reorders (a packet waits for the one ahead).
    #[serde(default)]
    pub jitter_reorders: bool,
    /// The receive side's wake period: a packet is handed to the receiver at the first wake at or
    /// after its arrival, wakes falling at multiples of this (plus `release_wake_jitter_us`).
    /// 0: on time. See "Timing noise" above.
    #[serde(default)]
    pub release_granularity_us: u64,
    /// Each receive-side wake is late by a random amount uniform in `[0, this]`; at most
    /// `release_granularity_us` (so wakes stay in order).
    #[serde(default)]
    pub release_wake_jitter_us: u64,
    /// GRO-like batch at the receive side: hold a receiving endpoint's packets until this many
    /// are held, or `gro_window_us` after the first of them, then hand them over together.
    /// 0 or 1: off.
    #[serde(default)]
    pub gro_batch_pkts: u32,
    /// The longest a GRO batch waits for more packets; above 0 when `gro_batch_pkts > 1`.
    #[serde(default)]
    pub gro_window_us: u64,
    /// Timer wake-ups of the endpoints that send into this link fire late by a random amount
    /// uniform in `[0, this]` (a virtualized clock whose sleeps overshoot). 0: on time.
    #[serde(default)]
    pub sender_wake_late_us: u64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            rate_bps: 0,
            queue_limit_bytes: DEFAULT_QUEUE_LIMIT_BYTES,
            delay_us: 0,
            jitter_us: 0,
            loss: LossModel::None,
            reorder_prob: 0.0,
            reorder_extra_delay_us: 0,
            duplicate_prob: 0.0,
            corrupt_prob: 0.0,
            blackouts: Vec::new(),
            stalls: None,
            jitter_reorders: false,
            release_granularity_us: 0,
            release_wake_jitter_us: 0,
            gro_batch_pkts: 0,
            gro_window_us: 0,
            sender_wake_late_us: 0,
        }
    }
}

impl LinkConfig {
    /// A rate limit with its drop-tail queue.
    pub fn with_rate(mut self, rate_bps: u64, queue_limit_bytes: u64) -> Self {
        self.rate_bps = rate_bps;
        self.queue_limit_bytes = queue_limit_bytes;
        self
    }

    /// One-way propagation delay.
    pub fn with_delay(mut self, delay_us: u64) -> Self {
        self.delay_us = delay_us;
        self
    }

    /// Order-preserving jitter in `[0, jitter_us]`.
    pub fn with_jitter(mut self, jitter_us: u64) -> Self {
        self.jitter_us = jitter_us;
        self
    }

    /// Random loss on the wire.
    pub fn with_loss(mut self, loss: LossModel) -> Self {
        self.loss = loss;
        self
    }

    /// Independent loss with probability `p`.
    pub fn with_bernoulli_loss(self, p: f64) -> Self {
        self.with_loss(LossModel::Bernoulli { p })
    }

    /// Hold back a share `prob` of packets by `extra_delay_us`.
    pub fn with_reorder(mut self, prob: f64, extra_delay_us: u64) -> Self {
        self.reorder_prob = prob;
        self.reorder_extra_delay_us = extra_delay_us;
        self
    }

    /// Deliver a second copy of a share `prob` of packets.
    pub fn with_duplicate(mut self, prob: f64) -> Self {
        self.duplicate_prob = prob;
        self
    }

    /// Flip one random bit in a share `prob` of packets.
    pub fn with_corrupt(mut self, prob: f64) -> Self {
        self.corrupt_prob = prob;
        self
    }

    /// Lose every packet leaving the queue in `[start_us, end_us)`.
    pub fn with_blackout(mut self, start_us: u64, end_us: u64) -> Self {
        self.blackouts.push((start_us, end_us));
        self
    }

    /// Stall delivery for the first `length_us` of every `every_us` (see [`Self::stalls`]).
    pub fn with_stalls(mut self, every_us: u64, length_us: u64) -> Self {
        self.stalls = Some((every_us, length_us));
        self
    }

    /// Let the jitter reorder packets (see [`Self::jitter_reorders`]).
    pub fn with_jitter_reorders(mut self) -> Self {
        self.jitter_reorders = true;
        self
    }

    /// Hand packets to the receiver only at wakes every `granularity_us`, each late by up to
    /// `wake_jitter_us` (see [`Self::release_granularity_us`]).
    pub fn with_release_granularity(mut self, granularity_us: u64, wake_jitter_us: u64) -> Self {
        self.release_granularity_us = granularity_us;
        self.release_wake_jitter_us = wake_jitter_us;
        self
    }

    /// Hold packets in GRO-like batches of up to `pkts`, at most `window_us` (see
    /// [`Self::gro_batch_pkts`]).
    pub fn with_gro_batch(mut self, pkts: u32, window_us: u64) -> Self {
        self.gro_batch_pkts = pkts;
        self.gro_window_us = window_us;
        self
    }

    /// Wake the endpoints that send into this link up to `late_us` late (see
    /// [`Self::sender_wake_late_us`]).
    pub fn with_sender_wake_late(mut self, late_us: u64) -> Self {
        self.sender_wake_late_us = late_us;
        self
    }

    /// Whether GRO-like batching is on (`gro_batch_pkts > 1`).
    pub fn gro_enabled(&self) -> bool {
        self.gro_batch_pkts > 1
    }

    /// A description of what is wrong with the config, if anything.
    pub fn check(&self) -> Result<(), String> {
        self.loss.check()?;
        for (name, p) in [
            ("reorder_prob", self.reorder_prob),
            ("duplicate_prob", self.duplicate_prob),
            ("corrupt_prob", self.corrupt_prob),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{name} = {p} is outside [0, 1]"));
            }
        }
        if let Some((start, end)) = self.blackouts.iter().find(|(start, end)| start > end) {
            return Err(format!("blackout window [{start}, {end}) ends before it starts"));
        }
        if let Some((every, length)) = self.stalls.filter(|(every, length)| length >= every) {
            return Err(format!("stalls of {length} us every {every} us leave no time to deliver"));
        }
        if self.release_wake_jitter_us > self.release_granularity_us {
            return Err(format!(
                "release_wake_jitter_us = {} is above release_granularity_us = {} (wakes would \
                 come out of order)",
                self.release_wake_jitter_us, self.release_granularity_us
            ));
        }
        if self.gro_enabled() && self.gro_window_us == 0 {
            return Err(format!(
                "gro_batch_pkts = {} needs gro_window_us > 0",
                self.gro_batch_pkts
            ));
        }
        Ok(())
    }
}

/// Where and when one flow (a pair of endpoints) joins the network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowConfig {
    /// Virtual time at which both endpoints are first woken; nothing happens to them before.
    pub start_us: u64,
    /// This flow's own one-way delay on `a -> b`, added after the shared link (as if `b` sat
    /// behind a longer access line), so flows can have different round-trip times.
    pub extra_delay_fwd_us: u64,
    /// This flow's own one-way delay on `b -> a`, added after the shared reverse link.
    pub extra_delay_rev_us: u64,
}

impl FlowConfig {
    /// A flow starting at `start_us` with no extra delay.
    pub fn starting_at(start_us: u64) -> Self {
        Self { start_us, ..Self::default() }
    }

    /// Extra one-way delay in each direction.
    pub fn with_extra_delay(mut self, fwd_us: u64, rev_us: u64) -> Self {
        self.extra_delay_fwd_us = fwd_us;
        self.extra_delay_rev_us = rev_us;
        self
    }
}
