//! Named, reproducible transfer scenarios: one or more transfers of `sluice-proto` channels over a
//! simulated bottleneck, with the numbers a reviewer asks for (goodput, utilization,
//! retransmissions, fairness, queuing delay) and a rate-over-time trace.
//!
//! A transfer ("flow" in [`Scenario`]) moves one file over [`Scenario::channels`] data channels,
//! each carrying one contiguous stripe; with [`Scenario::coupled`] its channels share one rate
//! budget through a [`CouplingGroup`]. Results are per transfer (summed over its channels).

use std::sync::Arc;

use serde::Serialize;
use sluice_proto::cc::CcKind;
use sluice_proto::cc::coupled::CouplingGroup;
use sluice_proto::config::ChannelConfig;
use sluice_proto::intervals::IntervalSet;

use crate::channel::{ChannelEndpoint, channel_pair_part};
use crate::{
    FlowConfig, GilbertElliott, LinkConfig, LossModel, Sim, SimConfig, WIRE_OVERHEAD_BYTES,
};

/// One simulated experiment. Loss, jitter, duplication and corruption apply to both directions;
/// the RTT is split evenly between them; the bottleneck rate is the same both ways.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Bottleneck rate in Mbit/s (of wire bytes, IP and UDP headers included).
    pub rate_mbit: f64,
    /// Round-trip propagation delay in ms.
    pub rtt_ms: f64,
    /// Mean random loss in percent.
    pub loss_pct: f64,
    /// With `Some(mean burst length in packets)`, loss is Gilbert-Elliott bursty, else Bernoulli.
    pub loss_burst_pkts: Option<f64>,
    /// Bytes each flow (transfer) moves, in MiB.
    pub size_mib: f64,
    /// Number of flows (transfers) sharing the bottleneck.
    pub flows: usize,
    /// Data channels per transfer; the file is cut into this many contiguous stripes.
    pub channels: usize,
    /// Channels of each transfer, overriding [`Scenario::channels`] for the transfers it lists
    /// (transfer `t` uses `flow_channels[t]` if present).
    pub flow_channels: Vec<usize>,
    /// Whether the channels of a transfer share one rate budget ([`CouplingGroup`]); otherwise
    /// each channel runs its own controller. A coupled transfer of one channel behaves exactly
    /// like an uncoupled one.
    pub coupled: bool,
    /// Later flows start this much after the previous one.
    pub flow_stagger_ms: u64,
    /// Congestion controller.
    pub cc: CcKind,
    /// Controller of each transfer, overriding [`Scenario::cc`] for the transfers it lists.
    pub flow_cc: Vec<CcKind>,
    /// Rate of the `fixed` controller (and cap of the others) in Mbit/s of UDP payload; 0 = none.
    pub cc_rate_mbit: f64,
    /// Seed of everything random.
    pub seed: u64,
    /// Drop-tail queue size in bandwidth-delay products.
    pub queue_bdp: f64,
    /// One-way delay jitter in ms (never reorders).
    pub jitter_ms: f64,
    /// Share of packets reordered, in percent.
    pub reorder_pct: f64,
    /// Share of packets duplicated, in percent.
    pub duplicate_pct: f64,
    /// Share of packets with one bit flipped, in percent.
    pub corrupt_pct: f64,
    /// A window `(start s, length s)` during which both directions lose everything.
    pub blackout_s: Option<(f64, f64)>,
    /// Receive stalls `(every ms, length ms)` in both directions: delivery pauses, then what
    /// was due arrives at once (a late host or emulator; see `LinkConfig::stalls`).
    pub stalls_ms: Option<(f64, f64)>,
    /// Let the jitter reorder packets (each packet's delay its own); otherwise it keeps FIFO order.
    pub jitter_reorders: bool,
    /// Receive batching on the data direction: packets are handed to the receiver only at wakes
    /// every this many us (NIC interrupt coalescing, an emulator thread); 0 = on time. See
    /// [`LinkConfig::release_granularity_us`].
    pub release_granularity_us: u64,
    /// Each of those wakes is late by up to this many us (at most the granularity).
    pub release_wake_jitter_us: u64,
    /// GRO-like batching on the data direction: `(packets, window us)`, see
    /// [`LinkConfig::gro_batch_pkts`].
    pub gro_batch: Option<(u32, u64)>,
    /// ACK compression: feedback reaches the sender only at wakes every this many us (the
    /// reverse link's release granularity); 0 = on time.
    pub ack_compression_us: u64,
    /// The sender's timer wake-ups fire late by up to this many us (uniform), as on a host with
    /// a virtualized clock; 0 = on time. See [`LinkConfig::sender_wake_late_us`].
    pub sleep_overshoot_us: u64,
    /// The sender's pacing catch-up after a late wake-up, in packets
    /// ([`ChannelConfig::max_burst_pkts`]): 1 (the default) suits the simulator's exact clock;
    /// the real driver, whose sleeps overshoot, uses 256 (`REAL_TIME_BURST_PKTS` in the `sluice`
    /// crate), which the scenarios with [`Scenario::sleep_overshoot_us`] should use too.
    pub max_burst_pkts: u32,
    /// Path memory: every transfer starts from this remembered delivery rate in Mbit/s
    /// ([`ChannelConfig::start_rate_bps`]); 0 = first contact.
    pub start_mbit: f64,
    /// Simulated time limit in seconds.
    pub deadline_s: f64,
    /// Trace sampling period in ms (0: no trace).
    pub sample_ms: u64,
    /// Datagram size in bytes.
    pub packet_size: usize,
    /// Fairness is computed over each flow's delivery in this window `(from s, to s)`; `None`
    /// uses the whole transfer (bytes over completion time).
    pub fairness_window_s: Option<(f64, f64)>,
}

impl Default for Scenario {
    fn default() -> Self {
        Self {
            rate_mbit: 1000.0,
            rtt_ms: 100.0,
            loss_pct: 0.0,
            loss_burst_pkts: None,
            size_mib: 256.0,
            flows: 1,
            channels: 1,
            flow_channels: Vec::new(),
            coupled: true,
            flow_stagger_ms: 0,
            cc: CcKind::Adaptive,
            flow_cc: Vec::new(),
            cc_rate_mbit: 0.0,
            seed: 1,
            queue_bdp: 1.0,
            jitter_ms: 0.0,
            reorder_pct: 0.0,
            duplicate_pct: 0.0,
            corrupt_pct: 0.0,
            blackout_s: None,
            stalls_ms: None,
            jitter_reorders: false,
            release_granularity_us: 0,
            release_wake_jitter_us: 0,
            gro_batch: None,
            ack_compression_us: 0,
            sleep_overshoot_us: 0,
            max_burst_pkts: ChannelConfig::default().max_burst_pkts,
            start_mbit: 0.0,
            deadline_s: 600.0,
            sample_ms: 0,
            packet_size: 1452,
            fairness_window_s: None,
        }
    }
}

/// One trace sample.
#[derive(Debug, Clone, Serialize)]
pub struct TracePoint {
    /// Simulated time in seconds.
    pub t_s: f64,
    /// Each flow's pacing rate in Mbit/s of UDP payload.
    pub rate_mbit: Vec<f64>,
    /// Each flow's delivered payload since the previous sample, in Mbit/s.
    pub goodput_mbit: Vec<f64>,
    /// Forward queue occupancy, as delay in ms.
    pub queue_ms: f64,
}

/// One flow's (transfer's) outcome, summed over its channels.
#[derive(Debug, Clone, Serialize)]
pub struct FlowResult {
    /// Payload goodput from the flow's start to its completion (or to the end of the run).
    pub goodput_mbit: f64,
    /// Every byte of the file arrived exactly once and intact (over all its channels).
    pub delivered_ok: bool,
    /// Retransmitted data packets over first transmissions, in percent.
    pub retransmitted_pct: f64,
    /// EXP timeouts at the sender.
    pub timeouts: u64,
    /// Datagrams the receiver rejected (failed authentication: corruption).
    pub rejected_pkts: u64,
    /// Packet numbers that did not increase, over both ends (must be 0).
    pub pn_violations: u64,
    /// Datagrams whose packet number was checked, over both ends.
    pub pn_checked: u64,
    /// With several channels: each channel's goodput over the transfer's time.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub channel_goodput_mbit: Vec<f64>,
}

/// What a scenario produced.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    /// Aggregate payload goodput of all flows, from the first start to the last completion.
    pub goodput_mbit: f64,
    /// Goodput over the link's goodput ceiling: rate x payload share of the wire x (1 - loss).
    pub utilization: f64,
    /// Retransmitted over first transmissions, all flows, in percent.
    pub retransmitted_pct: f64,
    /// Simulated seconds until the run stopped.
    pub sim_seconds: f64,
    /// Jain's fairness index over the flows (only with more than one flow).
    pub jain_index: Option<f64>,
    /// Each transfer's delivery rate over [`Scenario::fairness_window_s`], in Mbit/s.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub window_mbit: Vec<f64>,
    /// Every flow delivered every byte exactly once and intact.
    pub delivered_ok: bool,
    /// Forward queuing delay: median, 99th percentile and maximum, in ms.
    pub queue_delay_ms: [f64; 3],
    /// Per flow.
    pub flows: Vec<FlowResult>,
    /// Rate over time.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trace: Vec<TracePoint>,
}

impl Scenario {
    fn link(&self, one_way_us: u64) -> LinkConfig {
        let rate_bps = (self.rate_mbit * 1e6) as u64;
        let bdp_bytes = self.rate_mbit * 1e6 / 8.0 * self.rtt_ms / 1e3;
        let queue = (bdp_bytes * self.queue_bdp).max(64.0 * 1500.0) as u64;
        let p = self.loss_pct / 100.0;
        let loss = match self.loss_burst_pkts {
            Some(burst) if p > 0.0 => {
                LossModel::GilbertElliott(GilbertElliott::from_mean_loss_and_burst(p, burst))
            }
            _ if p > 0.0 => LossModel::Bernoulli { p },
            _ => LossModel::None,
        };
        let mut link = LinkConfig::default()
            .with_rate(rate_bps, queue)
            .with_delay(one_way_us)
            .with_jitter((self.jitter_ms * 1e3) as u64)
            .with_loss(loss)
            .with_duplicate(self.duplicate_pct / 100.0)
            .with_corrupt(self.corrupt_pct / 100.0);
        if self.reorder_pct > 0.0 {
            link = link.with_reorder(self.reorder_pct / 100.0, 2_000);
        }
        if let Some((start, len)) = self.blackout_s {
            link = link.with_blackout((start * 1e6) as u64, ((start + len) * 1e6) as u64);
        }
        if let Some((every, len)) = self.stalls_ms {
            link = link.with_stalls((every * 1e3) as u64, (len * 1e3) as u64);
        }
        if self.jitter_reorders {
            link = link.with_jitter_reorders();
        }
        link
    }

    /// The network: the same link both ways, plus the timing noise of each direction (the
    /// receive batching and the sender's late wake-ups on the data direction, the ACK
    /// compression on the reverse one).
    pub fn sim_config(&self) -> SimConfig {
        let one_way_us = (self.rtt_ms * 1e3 / 2.0) as u64;
        let mut config = SimConfig::symmetric(self.seed, self.link(one_way_us));
        let forward = &mut config.forward;
        forward.release_granularity_us = self.release_granularity_us;
        forward.release_wake_jitter_us = self.release_wake_jitter_us;
        if let Some((pkts, window_us)) = self.gro_batch {
            forward.gro_batch_pkts = pkts;
            forward.gro_window_us = window_us;
        }
        forward.sender_wake_late_us = self.sleep_overshoot_us;
        config.reverse.release_granularity_us = self.ack_compression_us;
        config
    }

    /// The timing noise in force, as `name=value` pairs (empty without any).
    pub fn timing_noise(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut add = |name: &str, value: String| out.push(format!("{name}={value}"));
        if self.jitter_ms > 0.0 {
            add("jitter_ms", self.jitter_ms.to_string());
        }
        if self.jitter_reorders {
            add("jitter_reorders", "true".into());
        }
        if self.release_granularity_us > 0 {
            add("release_granularity_us", self.release_granularity_us.to_string());
        }
        if self.release_wake_jitter_us > 0 {
            add("release_wake_jitter_us", self.release_wake_jitter_us.to_string());
        }
        if let Some((pkts, window_us)) = self.gro_batch {
            add("gro_batch", format!("{pkts}pkts/{window_us}us"));
        }
        if self.ack_compression_us > 0 {
            add("ack_compression_us", self.ack_compression_us.to_string());
        }
        if self.sleep_overshoot_us > 0 {
            add("sleep_overshoot_us", self.sleep_overshoot_us.to_string());
        }
        out
    }

    /// Channels of transfer `flow`.
    pub fn channels_of(&self, flow: usize) -> usize {
        self.flow_channels.get(flow).copied().unwrap_or(self.channels).max(1)
    }

    /// The controller of transfer `t`.
    pub fn cc_of(&self, t: usize) -> CcKind {
        self.flow_cc.get(t).copied().unwrap_or(self.cc)
    }

    /// The transfer channel `k` (numbered over all transfers in order) belongs to.
    fn transfer_of(&self, k: usize) -> usize {
        let mut first = 0;
        for t in 0..self.flows {
            first += self.channels_of(t);
            if k < first {
                return t;
            }
        }
        self.flows.saturating_sub(1)
    }

    /// The channel configuration of channel `flow`, numbered over all transfers in order (with
    /// one channel per transfer, channel `t` is transfer `t`'s).
    pub fn channel_config(&self, flow: usize) -> ChannelConfig {
        ChannelConfig {
            packet_size: self.packet_size,
            cc: self.cc_of(self.transfer_of(flow)),
            rate_bps: (self.cc_rate_mbit * 1e6) as u64,
            seed: self.seed ^ flow as u64,
            // As a session does: its handshake measured the round trip before the data starts.
            initial_rtt_us: ((self.rtt_ms * 1e3) as u64).max(1),
            initial_dsn: ((self.seed.wrapping_mul(0x9E37_79B9) >> 8) as u32 ^ flow as u32)
                & sluice_proto::seq::Seq31::MAX,
            max_burst_pkts: self.max_burst_pkts,
            start_rate_bps: (self.start_mbit * 1e6) as u64,
            ..ChannelConfig::default()
        }
    }

    /// Payload goodput ceiling of the link, in Mbit/s.
    pub fn ceiling_mbit(&self) -> f64 {
        let payload = self.channel_config(0).payload_size() as f64;
        let wire = self.packet_size as f64 + WIRE_OVERHEAD_BYTES as f64;
        self.rate_mbit * payload / wire * (1.0 - self.loss_pct / 100.0)
    }

    /// Runs the scenario. Deterministic: the same scenario gives the same result.
    pub fn run(&self) -> ScenarioResult {
        let mut sim: Sim<ChannelEndpoint> = Sim::new(self.sim_config());
        let total = (self.size_mib * 1024.0 * 1024.0) as u64;
        let mut starts_us = Vec::new();
        // Each transfer's channels: a range of the simulator's flows.
        let mut spans = Vec::new();
        for t in 0..self.flows {
            let start_us = t as u64 * self.flow_stagger_ms * 1000;
            let n_ch = self.channels_of(t);
            let first = spans.last().map_or(0, |r: &std::ops::Range<usize>| r.end);
            spans.push(first..first + n_ch);
            let group: Option<Arc<CouplingGroup>> =
                self.coupled.then(|| CouplingGroup::new(&self.channel_config(first), n_ch));
            for c in 0..n_ch {
                let k = first + c;
                let cfg = self.channel_config(k);
                let stripe = total * c as u64 / n_ch as u64..total * (c as u64 + 1) / n_ch as u64;
                let (a, b) = channel_pair_part(
                    &cfg,
                    group.as_ref().map(|g| (g, c)),
                    self.seed.wrapping_add(k as u64),
                    self.seed ^ (t as u64) << 32,
                    stripe,
                    start_us,
                )
                .expect("scenario channel config is valid");
                sim.add_flow(a, b, FlowConfig::starting_at(start_us));
            }
            starts_us.push(start_us);
        }
        // Sums a per-channel quantity over each transfer's channels.
        let per_transfer = |values: Vec<f64>| -> Vec<f64> {
            spans.iter().map(|r| values[r.clone()].iter().fold(0.0, |a, b| a + b)).collect()
        };
        let delivered_bytes = |view: &Sim<ChannelEndpoint>| -> Vec<u64> {
            let per_channel: Vec<u64> = view
                .flows()
                .iter()
                .map(|f| f.b.as_receiver().map_or(0, |r| r.delivered.len()))
                .collect();
            spans.iter().map(|r| per_channel[r.clone()].iter().sum()).collect()
        };

        let payload_bits = self.channel_config(0).payload_size() as f64 * 8.0;
        let rate_bps = self.rate_mbit * 1e6;
        let mut trace = Vec::new();
        let mut last_delivered = vec![0u64; self.flows];
        // Delivered bytes per flow at every sample, for windowed fairness.
        let mut delivered_at: Vec<(u64, Vec<u64>)> = Vec::new();
        // Fairness over a window needs samples even when no trace was asked for.
        let keep_trace = self.sample_ms > 0;
        let sample_ms = match (self.sample_ms, self.fairness_window_s) {
            (0, Some(_)) => 500,
            (ms, _) => ms,
        };
        let sample_us = sample_ms * 1000;
        let deadline_us = (self.deadline_s * 1e6) as u64;
        let summary = sim.run_until(deadline_us, sample_us, |t_us, view| {
            let delivered = delivered_bytes(view);
            delivered_at.push((t_us, delivered.clone()));
            if !keep_trace {
                return;
            }
            let dt_s = sample_us as f64 / 1e6;
            let rates = view
                .flows()
                .iter()
                .map(|f| f.a.as_sender().map_or(0.0, |s| s.sender.rate_pps() * payload_bits / 1e6))
                .collect();
            trace.push(TracePoint {
                t_s: t_us as f64 / 1e6,
                rate_mbit: per_transfer(rates).into_iter().map(round1).collect(),
                goodput_mbit: delivered
                    .iter()
                    .zip(&last_delivered)
                    .map(|(d, l)| round1((d - l) as f64 * 8.0 / dt_s / 1e6))
                    .collect(),
                queue_ms: round1(view.forward_queue_bytes() as f64 * 8.0 / rate_bps * 1e3),
            });
            last_delivered = delivered;
        });
        let end_us = summary.end_us;

        let mut flows = Vec::new();
        let mut goodputs = Vec::new();
        let (mut new_pkts, mut retx_pkts) = (0u64, 0u64);
        let mut last_completion_us = 0u64;
        for (t, span) in spans.iter().enumerate() {
            let transfer = &sim.flows()[span.clone()];
            let ends: Vec<_> = transfer
                .iter()
                .map(|f| {
                    let s = f.a.as_sender().expect("a is the sender");
                    let r = f.b.as_receiver().expect("b is the receiver");
                    (s, r)
                })
                .collect();
            let done_us = ends.iter().map(|(_, r)| r.completed_us.unwrap_or(end_us)).max();
            let done_us = done_us.unwrap_or(end_us);
            last_completion_us = last_completion_us.max(done_us);
            let secs = (done_us.saturating_sub(starts_us[t])).max(1) as f64 / 1e6;
            let bytes: u64 = ends.iter().map(|(_, r)| r.delivered.len()).sum();
            let goodput = bytes as f64 * 8.0 / secs / 1e6;
            goodputs.push(goodput);
            // The whole file: every channel delivered its stripe intact, and the stripes tile it.
            let mut file = IntervalSet::new();
            for (_, r) in &ends {
                for (lo, hi) in r.delivered.ranges() {
                    file.insert(lo, hi);
                }
            }
            let file_ok = ends.iter().all(|(_, r)| r.delivered_ok())
                && file.len() == total
                && file.range_count() <= 1
                && (total == 0 || file.first() == Some(0));
            let mut f = FlowResult {
                goodput_mbit: round1(goodput),
                delivered_ok: file_ok,
                retransmitted_pct: 0.0,
                timeouts: 0,
                rejected_pkts: 0,
                pn_violations: 0,
                pn_checked: 0,
                channel_goodput_mbit: Vec::new(),
            };
            let (mut t_new, mut t_retx) = (0u64, 0u64);
            for (s, r) in &ends {
                let st = s.sender.stats();
                t_new += st.new_pkts;
                t_retx += st.retransmitted_pkts;
                f.timeouts += st.timeouts;
                f.rejected_pkts += r.receiver.stats().rejected_pkts;
                f.pn_violations += s.pn_check.violations + r.pn_check.violations;
                f.pn_checked += s.pn_check.checked + r.pn_check.checked;
                if span.len() > 1 {
                    f.channel_goodput_mbit
                        .push(round1(r.delivered.len() as f64 * 8.0 / secs / 1e6));
                }
            }
            f.retransmitted_pct = pct(t_retx, t_new);
            new_pkts += t_new;
            retx_pkts += t_retx;
            flows.push(f);
        }
        let first_start = starts_us.iter().copied().min().unwrap_or(0);
        let all_bytes: u64 =
            sim.flows().iter().map(|f| f.b.as_receiver().map_or(0, |r| r.delivered.len())).sum();
        let secs = (last_completion_us.saturating_sub(first_start)).max(1) as f64 / 1e6;
        let goodput = all_bytes as f64 * 8.0 / secs / 1e6;

        let window_mbit: Vec<f64> = match self.fairness_window_s {
            Some((from, to)) => window_rates(&delivered_at, from, to)
                .into_iter()
                .map(|bytes_per_us| round1(bytes_per_us * 8.0))
                .collect(),
            None => Vec::new(),
        };
        let jain_index = (self.flows > 1).then(|| {
            let shares =
                if window_mbit.is_empty() { goodputs.clone() } else { window_mbit.clone() };
            round3(jain(&shares))
        });
        let qd = &sim.forward_stats().queue_delay;
        ScenarioResult {
            goodput_mbit: round1(goodput),
            utilization: round3(goodput / self.ceiling_mbit()),
            retransmitted_pct: pct(retx_pkts, new_pkts),
            sim_seconds: round3(end_us as f64 / 1e6),
            jain_index,
            window_mbit,
            delivered_ok: flows.iter().all(|f| f.delivered_ok),
            queue_delay_ms: [qd.p50_ns(), qd.quantile_ns(0.99), qd.max_ns()]
                .map(|ns| round1(ns as f64 / 1e6)),
            flows,
            trace,
        }
    }
}

/// Each flow's delivery rate between the samples nearest `from` and `to` seconds.
fn window_rates(delivered_at: &[(u64, Vec<u64>)], from_s: f64, to_s: f64) -> Vec<f64> {
    let at = |t_s: f64| {
        let t_us = (t_s * 1e6) as u64;
        delivered_at.iter().find(|(t, _)| *t >= t_us).or(delivered_at.last())
    };
    match (at(from_s), at(to_s)) {
        (Some((t0, d0)), Some((t1, d1))) if t1 > t0 => {
            d1.iter().zip(d0).map(|(b, a)| (b - a) as f64 / (t1 - t0) as f64).collect()
        }
        _ => Vec::new(),
    }
}

/// Jain's fairness index: `(sum x)^2 / (n * sum x^2)`, 1 when all shares are equal.
pub fn jain(shares: &[f64]) -> f64 {
    let sum: f64 = shares.iter().sum();
    let sq: f64 = shares.iter().map(|x| x * x).sum();
    if shares.is_empty() || sq == 0.0 { 0.0 } else { sum * sum / (shares.len() as f64 * sq) }
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { round3(part as f64 * 100.0 / whole as f64) }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_of_equal_and_unequal_shares() {
        assert_eq!(jain(&[5.0, 5.0]), 1.0);
        assert!((jain(&[1.0, 0.0]) - 0.5).abs() < 1e-12);
        assert!((jain(&[3.0, 1.0]) - 0.8).abs() < 1e-12);
        assert_eq!(jain(&[]), 0.0);
    }
}
