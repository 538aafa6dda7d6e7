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
/// 4. propagation (`delay_us`, plus `jitter_us` that never reorders, plus the reordering
///    hold-back for the few packets chosen for it);
/// 5. receive stalls: what would arrive during a stall arrives, in order, when it ends.
///
/// The default is an ideal link: unlimited rate, no delay, no loss.
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
