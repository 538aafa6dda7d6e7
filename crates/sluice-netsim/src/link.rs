//! One direction of the shared link: drop-tail queue, rate limiter, lossy wire, propagation.

use std::collections::VecDeque;

use sluice_proto::rng::Rng;

use crate::config::LinkConfig;
use crate::loss::LossProcess;
use crate::stats::LinkStats;

const PS_PER_US: u128 = 1_000_000;
const PS_PER_S: u128 = 1_000_000_000_000;

/// What becomes of a packet offered to the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Dropped (the cause is in the link's stats).
    Dropped,
    /// Arrives at the far end of the link at `at_us`.
    Arrives {
        at_us: u64,
        /// Flip this bit (counted from the first byte's least significant bit) on the way.
        flip_bit: Option<u64>,
        /// Deliver a second copy right after it.
        duplicate: bool,
    },
}

/// One link direction's state. The queue is not simulated packet by packet: with one FIFO at a
/// fixed rate, each packet's serialization start and end are known when it arrives, so the link
/// keeps only their end times (to know the backlog) and never needs events of its own.
/// Serialization times are kept in picoseconds so that sub-microsecond packet times add up.
#[derive(Debug)]
pub(crate) struct Link {
    config: LinkConfig,
    stats: LinkStats,
    /// When the last admitted packet's last bit leaves the queue.
    busy_until_ps: u128,
    /// Admitted packets not yet fully serialized: (end of serialization, wire bytes).
    backlog: VecDeque<(u128, u64)>,
    backlog_bytes: u64,
    /// The latest arrival time handed out to an in-order packet: nothing in order arrives earlier.
    last_arrival_us: u64,
    loss: LossProcess,
    jitter_rng: Rng,
    reorder_rng: Rng,
    duplicate_rng: Rng,
    corrupt_rng: Rng,
    /// Seeds the receive side's wake jitter (a pure function of it and the wake's index).
    wake_seed: u64,
    /// Draws how late the sending endpoints' timer wake-ups fire.
    wake_late_rng: Rng,
}

impl Link {
    /// A link whose random streams are all drawn from `seeds`, except those of the timing noise,
    /// drawn from `timing_seeds` (so that a config without timing noise draws exactly what it
    /// drew before the timing noise existed).
    pub(crate) fn new(config: LinkConfig, seeds: &mut Rng, timing_seeds: &mut Rng) -> Self {
        let wake_seed = timing_seeds.next_u64();
        let wake_late_rng = Rng::new(timing_seeds.next_u64());
        let mut stream = || Rng::new(seeds.next_u64());
        Self {
            wake_seed,
            wake_late_rng,
            loss: LossProcess::new(config.loss, stream()),
            jitter_rng: stream(),
            reorder_rng: stream(),
            duplicate_rng: stream(),
            corrupt_rng: stream(),
            config,
            stats: LinkStats::new(),
            busy_until_ps: 0,
            backlog: VecDeque::new(),
            backlog_bytes: 0,
            last_arrival_us: 0,
        }
    }

    pub(crate) fn stats(&self) -> &LinkStats {
        &self.stats
    }

    pub(crate) fn stats_mut(&mut self) -> &mut LinkStats {
        &mut self.stats
    }

    /// Wire bytes in the queue at `now_us`, counting the packet being serialized.
    pub(crate) fn queue_bytes(&self, now_us: u64) -> u64 {
        let now_ps = u128::from(now_us) * PS_PER_US;
        self.backlog.iter().rev().take_while(|(end_ps, _)| *end_ps > now_ps).map(|(_, b)| b).sum()
    }

    /// Offers a datagram of `len` bytes at `now_us` and decides its fate. Calls must come in
    /// non-decreasing `now_us`.
    pub(crate) fn offer(&mut self, now_us: u64, len: usize) -> Fate {
        let wire_bytes = len as u64 + crate::WIRE_OVERHEAD_BYTES;
        self.stats.offered.add(wire_bytes);

        let leaves_us = if self.config.rate_bps == 0 {
            now_us
        } else {
            match self.enqueue(now_us, wire_bytes) {
                Some(leaves_us) => leaves_us,
                None => {
                    self.stats.dropped_queue.add(wire_bytes);
                    return Fate::Dropped;
                }
            }
        };

        if self.config.blackouts.iter().any(|&(start, end)| (start..end).contains(&leaves_us)) {
            self.stats.dropped_blackout.add(wire_bytes);
            return Fate::Dropped;
        }
        if self.loss.lose() {
            self.stats.dropped_loss.add(wire_bytes);
            return Fate::Dropped;
        }

        let jitter_us = if self.config.jitter_us == 0 {
            0
        } else {
            self.jitter_rng.below(self.config.jitter_us + 1)
        };
        let mut in_order_us = leaves_us + self.config.delay_us + jitter_us;
        if !self.config.jitter_reorders {
            in_order_us = in_order_us.max(self.last_arrival_us);
        }
        if let Some((every_us, length_us)) = self.config.stalls {
            let into_us = in_order_us % every_us;
            if into_us < length_us {
                in_order_us += length_us - into_us;
            }
        }
        let reorder =
            self.config.reorder_prob > 0.0 && self.reorder_rng.chance(self.config.reorder_prob);
        let at_us = if reorder {
            // Held back without moving `last_arrival_us`, so the packets behind it may pass.
            self.stats.reordered.add(wire_bytes);
            in_order_us + self.config.reorder_extra_delay_us
        } else {
            self.last_arrival_us = self.last_arrival_us.max(in_order_us);
            in_order_us
        };
        let at_us = self.wake_at_or_after(at_us);

        let flip_bit = (len > 0
            && self.config.corrupt_prob > 0.0
            && self.corrupt_rng.chance(self.config.corrupt_prob))
        .then(|| self.corrupt_rng.below(len as u64 * 8));
        if flip_bit.is_some() {
            self.stats.corrupted.add(wire_bytes);
        }
        let duplicate = self.config.duplicate_prob > 0.0
            && self.duplicate_rng.chance(self.config.duplicate_prob);
        if duplicate {
            self.stats.duplicated.add(wire_bytes);
        }
        Fate::Arrives { at_us, flip_bit, duplicate }
    }

    /// The receive side's first wake at or after `at_us` (`at_us` itself without a granularity).
    /// Wake `k` falls at `k * G + j(k)`, with `j(k)` uniform in `[0, J]` from the seed and `k`
    /// alone; `J <= G` keeps the wakes in order, so the hand-over keeps the arrival order.
    pub(crate) fn wake_at_or_after(&self, at_us: u64) -> u64 {
        let g = self.config.release_granularity_us;
        if g == 0 {
            return at_us;
        }
        let j = self.config.release_wake_jitter_us;
        // Every wake before this one falls before `at_us - J`, so before `at_us`.
        let mut k = at_us.saturating_sub(j).div_ceil(g);
        loop {
            let wake_us = k * g + self.wake_jitter_us(k);
            if wake_us >= at_us {
                return wake_us;
            }
            k += 1;
        }
    }

    fn wake_jitter_us(&self, k: u64) -> u64 {
        match self.config.release_wake_jitter_us {
            0 => 0,
            j => Rng::new(self.wake_seed ^ k.wrapping_mul(0x9E37_79B9_7F4A_7C15)).below(j + 1),
        }
    }

    /// How late the next timer wake-up of an endpoint sending into this link fires: uniform in
    /// `[0, sender_wake_late_us]`.
    pub(crate) fn sender_wake_late_us(&mut self) -> u64 {
        match self.config.sender_wake_late_us {
            0 => 0,
            x => self.wake_late_rng.below(x + 1),
        }
    }

    /// Whether the sending endpoints' wake-ups are late at all.
    pub(crate) fn sender_wakes_late(&self) -> bool {
        self.config.sender_wake_late_us > 0
    }

    /// The GRO-like batch `(packets, window_us)`, if on.
    pub(crate) fn gro_batch(&self) -> Option<(usize, u64)> {
        self.config
            .gro_enabled()
            .then_some((self.config.gro_batch_pkts as usize, self.config.gro_window_us))
    }

    /// Admits a packet to the drop-tail queue if it fits; returns when its last bit leaves.
    fn enqueue(&mut self, now_us: u64, wire_bytes: u64) -> Option<u64> {
        let now_ps = u128::from(now_us) * PS_PER_US;
        while let Some(&(end_ps, bytes)) = self.backlog.front() {
            if end_ps > now_ps {
                break;
            }
            self.backlog.pop_front();
            self.backlog_bytes -= bytes;
        }
        if self.backlog_bytes + wire_bytes > self.config.queue_limit_bytes {
            return None;
        }
        let start_ps = self.busy_until_ps.max(now_ps);
        let serialize_ps = u128::from(wire_bytes) * 8 * PS_PER_S / u128::from(self.config.rate_bps);
        let end_ps = start_ps + serialize_ps;
        self.busy_until_ps = end_ps;
        self.backlog.push_back((end_ps, wire_bytes));
        self.backlog_bytes += wire_bytes;
        self.stats.queue_bytes_max = self.stats.queue_bytes_max.max(self.backlog_bytes);
        self.stats.queue_delay.record(((start_ps - now_ps) / 1000) as u64);
        Some(end_ps.div_ceil(PS_PER_US) as u64)
    }
}
