//! RBUDP / Tsunami blast: send at a fixed rate, repair from loss reports, never back off.

use super::{AckSignal, CongestionControl, LossSignal, WindowBasis};

/// A constant sending rate. Loss only causes retransmission; the window is the sender's buffer
/// bound so a stalled receiver still stops the blast eventually.
#[derive(Debug, Clone)]
pub struct Fixed {
    period_us: f64,
    window_pkts: f64,
}

impl Fixed {
    /// Blast at `rate_pps` packets per second, with at most `max_window_pkts` unacknowledged.
    pub fn new(rate_pps: f64, max_window_pkts: u32) -> Self {
        Self { period_us: 1e6 / rate_pps.max(1.0), window_pkts: f64::from(max_window_pkts) }
    }
}

impl CongestionControl for Fixed {
    fn on_ack(&mut self, _ack: &AckSignal) {}
    fn on_loss(&mut self, _loss: &LossSignal) {}
    fn on_timeout(&mut self, _now_us: u64) {}
    fn period_us(&self) -> f64 {
        self.period_us
    }
    fn window_pkts(&self) -> f64 {
        self.window_pkts
    }
    fn window_basis(&self) -> WindowBasis {
        WindowBasis::Unreceived
    }

    fn name(&self) -> &'static str {
        "fixed"
    }
}
