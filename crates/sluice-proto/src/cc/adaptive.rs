//! Sluice's default controller: UDT's rate-based structure that does not mistake random loss for
//! congestion. The algorithm and its reasoning are in `adaptive.md` beside this file.

use super::{AckSignal, CongestionControl, LossSignal, WindowBasis, udt_increase_pkts};
use crate::SYN_US;

const SYN: f64 = SYN_US as f64;
/// Floor of the sending rate.
const MIN_RATE_PPS: f64 = 100.0;
/// Multiplicative decrease on congestion (UDT's 1/1.125 expressed as a rate factor).
const DECREASE: f64 = 1.0 / 1.125;
/// The deepest single cut (to half), for a queue far above its target.
const MAX_DECREASE: f64 = 0.5;
/// On leaving startup, the rate is set this far below the measured delivery rate so the queue
/// built while probing drains.
const DRAIN: f64 = 0.85;
/// Once the packet pairs have measured the link, startup resumes from at least this share of it.
const STARTUP_FLOOR_OF_CAPACITY: f64 = 0.25;
/// A capacity estimate at or above this is the receiver's clock resolution (pairs one
/// microsecond or less apart: delivered together by an interrupt, a receive batch or an
/// emulator's late wake-up), not a measured link: startup does not jump to a share of it.
const UNRESOLVED_CAPACITY_PPS: f64 = 1_000_000.0;
/// Loss-rate epochs needed before the loss-trend signal is trusted.
const LOSS_EPOCHS_BEFORE_TREND: u32 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Rate doubles every RTT until the queue grows or the link capacity is reached.
    Startup,
    /// UDT's increase while the queue is short; multiplicative decrease on congestion signals.
    Steady,
}

/// Delay-aware, loss-tolerant rate control (see the module docs).
#[derive(Debug, Clone)]
pub struct Adaptive {
    mss_bytes: f64,
    max_window_pkts: f64,
    phase: Phase,
    rate_pps: f64,
    /// Rate just before the last decrease (UDT's "last decrease" reference for `L/9`).
    last_dec_rate_pps: f64,
    last_decrease_us: u64,
    last_update_us: Option<u64>,
    rtt_us: f64,
    min_rtt_us: f64,
    queue_delay_us: f64,
    recv_rate_pps: f64,
    capacity_pps: f64,
    loss: LossTrend,
}

/// Loss rate per epoch (one RTT, at least 100 ms) against its long-run average.
#[derive(Debug, Clone, Default)]
struct LossTrend {
    epoch_start_us: u64,
    sent: u64,
    lost: u64,
    /// Long-run loss ratio (EWMA over epochs).
    base: f64,
    epochs: u32,
}

impl LossTrend {
    /// Accounts an ACK interval; returns whether the epoch that just ended lost markedly more
    /// than the long run (the loss rate is growing: congestion, not random loss).
    fn update(&mut self, now_us: u64, sent: u64, lost: u64, epoch_us: u64) -> bool {
        self.sent += sent;
        self.lost += lost;
        if now_us < self.epoch_start_us + epoch_us || self.sent < 100 {
            return false;
        }
        let ratio = self.lost as f64 / self.sent as f64;
        let growing = self.epochs >= LOSS_EPOCHS_BEFORE_TREND
            && ratio > 0.02
            && ratio > 2.0 * self.base + 0.01;
        self.base = if self.epochs == 0 { ratio } else { 0.875 * self.base + 0.125 * ratio };
        self.epochs = self.epochs.saturating_add(1);
        self.epoch_start_us = now_us;
        self.sent = 0;
        self.lost = 0;
        growing
    }
}

impl Adaptive {
    /// A controller for packets of `mss_bytes`, a window of at most `max_window_pkts`, starting
    /// from an assumed RTT of `initial_rtt_us`.
    pub fn new(mss_bytes: usize, max_window_pkts: u32, initial_rtt_us: u64) -> Self {
        let rtt_us = initial_rtt_us.max(1) as f64;
        Self {
            mss_bytes: mss_bytes as f64,
            max_window_pkts: f64::from(max_window_pkts),
            phase: Phase::Startup,
            rate_pps: (16.0 * 1e6 / rtt_us).max(MIN_RATE_PPS),
            last_dec_rate_pps: 0.0,
            last_decrease_us: 0,
            last_update_us: None,
            rtt_us,
            min_rtt_us: rtt_us,
            queue_delay_us: 0.0,
            recv_rate_pps: 0.0,
            capacity_pps: 0.0,
            loss: LossTrend::default(),
        }
    }

    /// The queuing delay above which the path counts as congested: an eighth of the base RTT,
    /// kept between 2 and 10 ms.
    pub fn target_queue_delay_us(&self) -> f64 {
        (self.min_rtt_us / 8.0).clamp(2_000.0, 10_000.0)
    }

    /// Current sending rate in packets per second.
    pub fn rate_pps(&self) -> f64 {
        self.rate_pps
    }

    /// Whether the controller is still probing for the link rate.
    pub fn in_startup(&self) -> bool {
        self.phase == Phase::Startup
    }

    /// Multiplicative decrease, at most once per RTT + SYN so each cut is seen before the next.
    /// The cut is UDT's 1/9, or more when the queue is long: enough that the excess queue
    /// drains in about one round trip. It applies to the lower of the sending rate and the
    /// arrival speed (what actually gets through). Every flow through the bottleneck sees the same
    /// queue and so cuts by the same factor: the decrease stays multiplicative, hence fair.
    fn decrease(&mut self, now_us: u64) {
        if now_us < self.last_decrease_us + (self.rtt_us + SYN) as u64 {
            return;
        }
        self.last_decrease_us = now_us;
        self.last_dec_rate_pps = self.rate_pps;
        let excess_us = (self.queue_delay_us - self.target_queue_delay_us()).max(0.0);
        let drain = 1.0 - excess_us / (self.min_rtt_us + self.queue_delay_us);
        let factor = drain.clamp(MAX_DECREASE, DECREASE);
        let base = if self.recv_rate_pps > 0.0 {
            self.rate_pps.min(self.recv_rate_pps)
        } else {
            self.rate_pps
        };
        self.rate_pps = (base * factor).max(MIN_RATE_PPS);
    }

    /// Ends startup. After congestion (a queue was built) the rate drops below the delivery rate
    /// so the queue drains; on reaching the link capacity with no queue, it holds the capacity.
    fn leave_startup(&mut self, now_us: u64, congested: bool) {
        self.phase = Phase::Steady;
        if congested && self.recv_rate_pps > 0.0 {
            self.last_dec_rate_pps = self.rate_pps;
            self.rate_pps = self.rate_pps.min(self.recv_rate_pps * DRAIN).max(MIN_RATE_PPS);
            self.last_decrease_us = now_us;
        } else if self.capacity_pps > 0.0 {
            self.rate_pps = self.rate_pps.min(self.capacity_pps);
        }
    }

    /// UDT's increase, equations (1) and (2), with the available bandwidth estimated from the
    /// packet-pair capacity, and `L/9` while below the rate of the last decrease.
    fn increase(&mut self) {
        let mut avail_pps = self.capacity_pps - self.rate_pps;
        if self.rate_pps < self.last_dec_rate_pps {
            avail_pps = avail_pps.min(self.capacity_pps / 9.0);
        }
        self.rate_pps += udt_increase_pkts(avail_pps, self.mss_bytes) * 1e6 / SYN;
    }
}

impl CongestionControl for Adaptive {
    fn on_ack(&mut self, ack: &AckSignal) {
        let dt_us = self.last_update_us.map_or(SYN, |t| ack.now_us.saturating_sub(t) as f64);
        self.last_update_us = Some(ack.now_us);
        self.rtt_us = (ack.rtt_us as f64).max(1.0);
        self.min_rtt_us = (ack.min_rtt_us as f64).max(1.0);
        self.queue_delay_us = f64::from(ack.queue_delay_us);
        if ack.recv_rate_pps > 0 {
            self.recv_rate_pps = f64::from(ack.recv_rate_pps);
        }
        if ack.capacity_pps > 0 {
            self.capacity_pps = f64::from(ack.capacity_pps);
        }
        let epoch_us = (self.rtt_us as u64).max(100_000);
        let loss_growing = self.loss.update(ack.now_us, ack.sent_pkts, ack.lost_pkts, epoch_us);
        let congested = self.queue_delay_us > self.target_queue_delay_us() || loss_growing;

        match self.phase {
            Phase::Startup => {
                let at_capacity = self.capacity_pps > 0.0 && self.rate_pps >= self.capacity_pps;
                if congested || at_capacity {
                    self.leave_startup(ack.now_us, congested);
                } else {
                    let growth = 2f64.powf(dt_us.min(4.0 * SYN) / self.rtt_us.max(2.0 * SYN));
                    let floor = if self.capacity_pps < UNRESOLVED_CAPACITY_PPS {
                        self.capacity_pps * STARTUP_FLOOR_OF_CAPACITY
                    } else {
                        0.0
                    };
                    self.rate_pps = (self.rate_pps * growth).max(floor);
                }
            }
            Phase::Steady => {
                if congested {
                    self.decrease(ack.now_us);
                } else if dt_us > 0.0 {
                    self.increase();
                }
            }
        }
    }

    fn on_loss(&mut self, loss: &LossSignal) {
        // Loss while the queue is long is congestion (the queue overflowed); loss with a short
        // queue is random and only repaired.
        if f64::from(loss.queue_delay_us) > self.target_queue_delay_us() / 2.0 {
            match self.phase {
                Phase::Startup => self.leave_startup(loss.now_us, true),
                Phase::Steady => self.decrease(loss.now_us),
            }
        }
    }

    fn on_timeout(&mut self, now_us: u64) {
        // No feedback at all: either a blackout or heavy congestion. Fall back and probe again.
        self.rate_pps = (self.rate_pps / 4.0).max(MIN_RATE_PPS);
        self.phase = Phase::Startup;
        self.last_decrease_us = now_us;
    }

    fn period_us(&self) -> f64 {
        1e6 / self.rate_pps
    }

    fn window_pkts(&self) -> f64 {
        // Room for several round trips: the cumulative ACK stalls behind repairs on lossy paths,
        // and the window must not become the limit there (rate control is).
        (self.rate_pps * (4.0 * self.rtt_us + SYN) / 1e6 + 64.0).min(self.max_window_pkts)
    }

    fn window_basis(&self) -> WindowBasis {
        WindowBasis::Unreceived
    }

    fn name(&self) -> &'static str {
        "adaptive"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(now_us: u64, queue_delay_us: u32, capacity_pps: u32) -> AckSignal {
        AckSignal {
            now_us,
            acked_pkts: 10,
            rtt_us: 100_000,
            rtt_var_us: 1_000,
            min_rtt_us: 100_000,
            recv_rate_pps: 50_000,
            capacity_pps,
            queue_delay_us,
            real_period_us: None,
            sent_pkts: 1_000,
            lost_pkts: 10,
            snd_next: 1_000,
        }
    }

    #[test]
    fn startup_doubles_per_rtt_and_leaves_on_queue_growth() {
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        let r0 = cc.rate_pps();
        for i in 1..=10 {
            cc.on_ack(&ack(i * 10_000, 0, 0));
        }
        let growth = cc.rate_pps() / r0;
        assert!((1.9..2.2).contains(&growth), "one RTT of startup grew the rate x{growth}");
        cc.on_ack(&ack(110_000, 20_000, 0));
        assert!(!cc.in_startup());
        assert!(cc.rate_pps() <= 50_000.0 * DRAIN + 1e-9, "drains below the arrival speed");
    }

    #[test]
    fn startup_jumps_to_a_quarter_of_capacity_and_holds_capacity_without_a_queue() {
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        cc.on_ack(&ack(10_000, 0, 80_000));
        assert!(cc.in_startup());
        assert!(cc.rate_pps() >= 20_000.0, "jumped to L/4: {}", cc.rate_pps());
        let mut now = 10_000;
        while cc.in_startup() {
            now += 10_000;
            cc.on_ack(&ack(now, 0, 80_000));
            assert!(now < 400_000, "two doublings from L/4 reach L in about two RTTs");
        }
        assert_eq!(cc.rate_pps(), 80_000.0, "no queue: holds the capacity, no drain");
    }

    #[test]
    fn startup_does_not_jump_to_a_capacity_at_the_clock_resolution() {
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        let r0 = cc.rate_pps();
        // Pairs 1 us apart or less say 1,000,000 pkt/s: no jump to 250,000.
        cc.on_ack(&ack(10_000, 0, 1_000_000));
        assert!(cc.in_startup());
        assert!(cc.rate_pps() < 2.0 * r0, "jumped to {}", cc.rate_pps());
        // A resolved estimate is jumped to as before.
        cc.on_ack(&ack(20_000, 0, 80_000));
        assert!(cc.rate_pps() >= 20_000.0, "{}", cc.rate_pps());
    }

    #[test]
    fn random_loss_is_ignored_congested_loss_is_not() {
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        // Leave startup on a 12 ms queue (target 10 ms at 100 ms RTT).
        cc.on_ack(&ack(10_000, 12_000, 0));
        assert!(!cc.in_startup());
        let r = cc.rate_pps();
        let loss = LossSignal {
            now_us: 500_000,
            largest_lost: 10,
            lost_pkts: 1,
            snd_next: 100,
            queue_delay_us: 0,
        };
        cc.on_loss(&loss);
        assert_eq!(cc.rate_pps(), r, "loss with an empty queue is random");
        cc.on_loss(&LossSignal { queue_delay_us: 9_000, ..loss });
        // The cut factor comes from the queue last reported by an ACK (12 ms): the excess of
        // 2 ms over 112 ms is small, so UDT's 1/1.125 applies.
        assert!((cc.rate_pps() - r * DECREASE).abs() < 1e-9, "loss with a queue is congestion");
        cc.on_loss(&LossSignal { queue_delay_us: 9_000, now_us: 510_000, ..loss });
        assert!((cc.rate_pps() - r * DECREASE).abs() < 1e-9, "one decrease per RTT");
    }

    #[test]
    fn a_long_queue_is_drained_in_about_one_round_trip() {
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        cc.on_ack(&ack(10_000, 0, 80_000)); // startup jumps to L/4 = 20000 pkt/s
        cc.on_ack(&ack(20_000, 12_000, 80_000)); // a queue: leave startup
        assert!(!cc.in_startup());
        let r = cc.rate_pps();
        assert!(r > 10_000.0);
        // 60 ms of queue, 50 ms above target: cut by 50 / 160, applied to min(rate, arrival).
        cc.on_ack(&ack(200_000, 60_000, 80_000));
        let expected = r.min(50_000.0) * (1.0 - 50.0 / 160.0);
        assert!((cc.rate_pps() - expected).abs() < 1e-6, "{} vs {expected}", cc.rate_pps());
        // Far too long a queue: never more than halved at once.
        cc.on_ack(&ack(400_000, 400_000, 80_000));
        let halved = expected.min(50_000.0) * MAX_DECREASE;
        assert!((cc.rate_pps() - halved).abs() < 1e-6, "{} vs {halved}", cc.rate_pps());
    }

    #[test]
    fn growing_loss_rate_counts_as_congestion() {
        let mut t = LossTrend::default();
        let mut now = 0;
        for _ in 0..8 {
            now += 100_000;
            assert!(!t.update(now, 10_000, 100, 100_000), "steady 1% is random loss");
        }
        now += 100_000;
        assert!(t.update(now, 10_000, 800, 100_000), "8% after 1% is growing");
    }
}
