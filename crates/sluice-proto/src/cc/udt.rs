//! UDT's congestion control as published (Gu, Hong, Grossman, SC'04, section 3.3).
//!
//! - Slow start: the flow window grows by every acknowledged packet, the period stays at its
//!   minimum, until the first loss (or the window reaches its maximum); then the period is set
//!   from the receiver's arrival speed.
//! - Every SYN without a NAK: `inc = max(10^(ceil(log10 B) - 9), 1/1500) * 1500 / MSS` packets
//!   per SYN (1), with B the estimated available bandwidth in bits/s, and `SYN/P = SYN/P' + inc`
//!   (2).
//! - B is `L - C` (L: packet-pair link capacity, C: current sending rate); after a decrease and
//!   until the rate recovers, `min(L/9, L - C)`; never below the minimum increase.
//! - On a NAK whose largest lost number is past the largest number sent at the last decrease
//!   (a new congestion epoch): `P = P' * 1.125` (3), and no sending for the next SYN.
//! - Flow window `W = AS * (SYN + RTT)` (+16 packets, as the reference implementation does).
//! - Before (2) and (3), `P'` is corrected by the real sending period (section 4.4).
//!
//! Departures from the paper, all where it is silent: the epoch that ends slow start counts as
//! the first decrease (so the slow-start overshoot's later NAKs do not each cut the rate), and a
//! timeout during slow start ends slow start.

use super::{AckSignal, CongestionControl, LossSignal, udt_increase_pkts};
use crate::SYN_US;

const SYN: f64 = SYN_US as f64;
const INITIAL_WINDOW_PKTS: f64 = 16.0;
const MIN_PERIOD_US: f64 = 1.0;

/// The paper's controller.
#[derive(Debug, Clone)]
pub struct Udt {
    mss_bytes: f64,
    max_window_pkts: f64,
    period_us: f64,
    window_pkts: f64,
    slow_start: bool,
    /// A NAK arrived since the last rate increase.
    loss_since_increase: bool,
    /// Period just before the last decrease; `f64::MAX` before any.
    last_dec_period_us: f64,
    /// Largest sequence number sent when the last decrease happened.
    last_dec_seq: Option<u64>,
    frozen_until_us: u64,
    last_rate_control_us: u64,
    recv_rate_pps: f64,
    capacity_pps: f64,
    rtt_us: f64,
}

impl Udt {
    /// A controller for packets of `mss_bytes`, with a flow window of at most `max_window_pkts`.
    pub fn new(mss_bytes: usize, max_window_pkts: u32) -> Self {
        Self {
            mss_bytes: mss_bytes as f64,
            max_window_pkts: f64::from(max_window_pkts),
            period_us: MIN_PERIOD_US,
            window_pkts: INITIAL_WINDOW_PKTS,
            slow_start: true,
            loss_since_increase: false,
            last_dec_period_us: f64::MAX,
            last_dec_seq: None,
            frozen_until_us: 0,
            last_rate_control_us: 0,
            recv_rate_pps: 0.0,
            capacity_pps: 0.0,
            rtt_us: SYN,
        }
    }

    fn end_slow_start(&mut self) {
        self.slow_start = false;
        self.period_us = if self.recv_rate_pps > 0.0 {
            1e6 / self.recv_rate_pps
        } else {
            (self.rtt_us + SYN) / self.window_pkts.max(1.0)
        };
    }

    /// Equation (1): packets per SYN to add, for available bandwidth `avail_pps`.
    fn increase_pkts(&self, avail_pps: f64) -> f64 {
        udt_increase_pkts(avail_pps, self.mss_bytes)
    }

    /// Whether the controller is still in slow start.
    pub fn in_slow_start(&self) -> bool {
        self.slow_start
    }
}

impl CongestionControl for Udt {
    fn on_ack(&mut self, ack: &AckSignal) {
        self.rtt_us = ack.rtt_us as f64;
        if ack.recv_rate_pps > 0 {
            self.recv_rate_pps = f64::from(ack.recv_rate_pps);
        }
        if ack.capacity_pps > 0 {
            self.capacity_pps = f64::from(ack.capacity_pps);
        }
        if self.slow_start {
            self.window_pkts += ack.acked_pkts as f64;
            if self.window_pkts > self.max_window_pkts {
                self.window_pkts = self.max_window_pkts;
                self.end_slow_start();
            }
            return;
        }
        if self.recv_rate_pps > 0.0 {
            self.window_pkts =
                (self.recv_rate_pps * (self.rtt_us + SYN) / 1e6 + 16.0).min(self.max_window_pkts);
        }
        if ack.now_us < self.last_rate_control_us + SYN_US {
            return;
        }
        self.last_rate_control_us = ack.now_us;
        if self.loss_since_increase {
            self.loss_since_increase = false;
            return;
        }
        if let Some(real) = ack.real_period_us {
            self.period_us = self.period_us.max(real);
        }
        let rate_pps = 1e6 / self.period_us;
        let mut avail_pps = self.capacity_pps - rate_pps;
        if self.period_us > self.last_dec_period_us {
            avail_pps = avail_pps.min(self.capacity_pps / 9.0);
        }
        let inc = self.increase_pkts(avail_pps);
        self.period_us = (self.period_us * SYN / (self.period_us * inc + SYN)).max(MIN_PERIOD_US);
    }

    fn on_loss(&mut self, loss: &LossSignal) {
        self.loss_since_increase = true;
        if self.slow_start {
            self.end_slow_start();
            self.last_dec_period_us = self.period_us;
            self.last_dec_seq = Some(loss.snd_next.saturating_sub(1));
            return;
        }
        if self.last_dec_seq.is_none_or(|s| loss.largest_lost > s) {
            self.last_dec_period_us = self.period_us;
            self.period_us *= 1.125;
            self.last_dec_seq = Some(loss.snd_next.saturating_sub(1));
            self.frozen_until_us = loss.now_us + SYN_US;
        }
    }

    fn on_timeout(&mut self, _now_us: u64) {
        if self.slow_start {
            self.end_slow_start();
        }
    }

    fn period_us(&self) -> f64 {
        self.period_us
    }

    fn window_pkts(&self) -> f64 {
        self.window_pkts
    }

    fn frozen_until_us(&self) -> u64 {
        self.frozen_until_us
    }

    fn name(&self) -> &'static str {
        "udt"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(now_us: u64, acked: u64, capacity_pps: u32) -> AckSignal {
        AckSignal {
            now_us,
            acked_pkts: acked,
            rtt_us: 100_000,
            rtt_var_us: 1_000,
            min_rtt_us: 100_000,
            recv_rate_pps: 40_000,
            capacity_pps,
            delivery_rate_pps: 40_000,
            queue_delay_us: 0,
            real_period_us: None,
            sent_pkts: 0,
            lost_pkts: 0,
            snd_next: 1_000,
        }
    }

    #[test]
    fn equation_one_matches_the_papers_table() {
        // Table 1 of the paper, MSS 1500: B <= 1 Gb/s -> 1 packet, <= 100 Mb/s -> 0.1, ...
        let cc = Udt::new(1500, 1 << 16);
        let pps = |bits: f64| bits / (1500.0 * 8.0);
        assert!((cc.increase_pkts(pps(1e9)) - 1.0).abs() < 1e-9);
        assert!((cc.increase_pkts(pps(9e8)) - 1.0).abs() < 1e-9);
        assert!((cc.increase_pkts(pps(1e8)) - 0.1).abs() < 1e-9);
        assert!((cc.increase_pkts(pps(5e9)) - 10.0).abs() < 1e-9);
        assert!((cc.increase_pkts(pps(1e5)) - 1.0 / 1500.0).abs() < 1e-12);
        assert!((cc.increase_pkts(-5.0) - 1.0 / 1500.0).abs() < 1e-12);
    }

    #[test]
    fn slow_start_then_increase_then_decrease_and_freeze() {
        let mut cc = Udt::new(1500, 1 << 16);
        cc.on_ack(&ack(10_000, 100, 80_000));
        assert!(cc.in_slow_start());
        assert_eq!(cc.window_pkts(), 116.0);
        let loss = LossSignal {
            now_us: 20_000,
            largest_lost: 500,
            lost_pkts: 1,
            snd_next: 1_000,
            queue_delay_us: 0,
        };
        cc.on_loss(&loss);
        assert!(!cc.in_slow_start());
        assert!((cc.period_us() - 25.0).abs() < 1e-9, "period from arrival speed 40000 pkt/s");
        // The SYN with the loss gives no increase; the next one does.
        cc.on_ack(&ack(40_000, 10, 80_000));
        assert!((cc.period_us() - 25.0).abs() < 1e-9);
        cc.on_ack(&ack(50_000, 10, 80_000));
        assert!(cc.period_us() < 25.0);
        // A NAK in the same epoch does not decrease; one past it does, by 1/8, and freezes.
        let p = cc.period_us();
        cc.on_loss(&LossSignal { largest_lost: 900, snd_next: 2_000, ..loss });
        assert_eq!(cc.period_us(), p);
        cc.on_loss(&LossSignal { now_us: 60_000, largest_lost: 1_500, snd_next: 3_000, ..loss });
        assert!((cc.period_us() - p * 1.125).abs() < 1e-9);
        assert_eq!(cc.frozen_until_us(), 70_000);
        assert!((cc.window_pkts() - (40_000.0 * 0.11 + 16.0)).abs() < 1e-6);
    }
}
