//! Congestion controllers behind one trait.
//!
//! A controller sets two things: the packet sending period (rate control, the main mechanism)
//! and the flow window (a cap on unacknowledged packets, the supportive mechanism). The sender
//! calls [`CongestionControl::on_ack`] for every ACK (about once per SYN), [`on_loss`] for every
//! NAK, and [`on_timeout`] when the EXP timer fires; it reads [`period_us`], [`window_pkts`] and
//! [`frozen_until_us`] before every send.
//!
//! - [`udt::Udt`]: the SC'04 paper's control, faithfully: equations (1)-(3).
//! - [`fixed::Fixed`]: RBUDP-style blast at a set rate; loss only triggers repair.
//! - [`adaptive::Adaptive`]: Sluice's default; UDT's structure, but it tells random loss from
//!   congestion (see `adaptive.md` beside this file).
//! - `low`: [`adaptive::Adaptive::scavenger`], the same controller with a queuing-delay target a
//!   quarter of the fair one, so it yields to every flow that tolerates more queue (LEDBAT's
//!   idea; see "The `low` policy" in `adaptive.md`).
//! - [`coupled::CouplingGroup`]: not a controller of its own: the channels of one transfer share
//!   one controller of any of the kinds above, so N channels are as fair as one flow (see
//!   `coupled.md` beside this file).
//!
//! [`on_loss`]: CongestionControl::on_loss
//! [`on_timeout`]: CongestionControl::on_timeout
//! [`period_us`]: CongestionControl::period_us
//! [`window_pkts`]: CongestionControl::window_pkts
//! [`frozen_until_us`]: CongestionControl::frozen_until_us

pub mod adaptive;
pub mod coupled;
mod filters;
pub mod fixed;
pub mod udt;

use crate::config::ChannelConfig;

/// Which controller a channel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CcKind {
    /// UDT as published.
    Udt,
    /// Fixed-rate blast.
    Fixed,
    /// Sluice's default: rate-based, delay-aware, tolerant of random loss.
    #[default]
    Adaptive,
    /// A scavenger: `Adaptive` with a lower queuing-delay target, so it yields to other traffic.
    Low,
}

impl CcKind {
    /// The controller's name as used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            CcKind::Udt => "udt",
            CcKind::Fixed => "fixed",
            CcKind::Adaptive => "adaptive",
            CcKind::Low => "low",
        }
    }

    /// Parses a name as given by [`CcKind::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "udt" => Some(CcKind::Udt),
            "fixed" => Some(CcKind::Fixed),
            "adaptive" => Some(CcKind::Adaptive),
            "low" => Some(CcKind::Low),
            _ => None,
        }
    }
}

/// What a flow window counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowBasis {
    /// Packets sent and not cumulatively acknowledged.
    Unacknowledged,
    /// Packets sent that the receiver has not received, as of its last ACK.
    Unreceived,
}

/// What an ACK tells the controller.
#[derive(Debug, Clone, Copy)]
pub struct AckSignal {
    /// Time of arrival.
    pub now_us: u64,
    /// Packets newly acknowledged by this ACK (cumulative acknowledgement advance).
    pub acked_pkts: u64,
    /// Smoothed RTT.
    pub rtt_us: u64,
    /// RTT variance.
    pub rtt_var_us: u64,
    /// Smallest RTT seen recently (the path's propagation delay, as far as we know).
    pub min_rtt_us: u64,
    /// Receiver's packet arrival speed (median filter), 0 if unknown.
    pub recv_rate_pps: u32,
    /// Receiver's packet-pair link capacity estimate, 0 if unknown.
    pub capacity_pps: u32,
    /// Receiver's delivery rate over the last 40 ms or more (robust to bunched delivery,
    /// counts idle time), 0 if unknown.
    pub delivery_rate_pps: u32,
    /// Receiver's estimate of the forward queuing delay over the last ACK interval.
    pub queue_delay_us: u32,
    /// The real sending period over the last interval, when the sender had data to send all
    /// along (UDT section 4.4), `None` otherwise.
    pub real_period_us: Option<f64>,
    /// Data packets (new and retransmitted) sent since the previous ACK.
    pub sent_pkts: u64,
    /// Packets reported lost (newly) since the previous ACK.
    pub lost_pkts: u64,
    /// Next new sequence number the sender will use.
    pub snd_next: u64,
}

/// What a NAK tells the controller.
#[derive(Debug, Clone, Copy)]
pub struct LossSignal {
    /// Time of arrival.
    pub now_us: u64,
    /// Largest sequence number reported lost.
    pub largest_lost: u64,
    /// Number of packets this NAK newly reports lost.
    pub lost_pkts: u64,
    /// Next new sequence number the sender will use.
    pub snd_next: u64,
    /// Latest forward queuing delay reported by the receiver.
    pub queue_delay_us: u32,
}

/// A congestion controller. Pure logic; time comes in the signals.
pub trait CongestionControl: std::fmt::Debug + Send {
    /// Called for every ACK.
    fn on_ack(&mut self, ack: &AckSignal);
    /// Called for every NAK that reports new losses.
    fn on_loss(&mut self, loss: &LossSignal);
    /// Called when the EXP timer fires (no feedback for a long time).
    fn on_timeout(&mut self, now_us: u64);
    /// Current packet sending period in microseconds.
    fn period_us(&self) -> f64;
    /// Current flow window: the most unacknowledged packets allowed.
    fn window_pkts(&self) -> f64;
    /// No new data may be sent before this time (UDT's freeze after a loss). 0 when not frozen.
    fn frozen_until_us(&self) -> u64 {
        0
    }
    /// What the flow window bounds. UDT bounds unacknowledged packets; on lossy paths the
    /// cumulative ACK waits behind repairs, so `adaptive` and `fixed` bound the packets the
    /// receiver has not got (sent beyond its highest, plus its holes) instead.
    fn window_basis(&self) -> WindowBasis {
        WindowBasis::Unacknowledged
    }
    /// Whether the controller is probing for the link's rate and wants the sender to time the
    /// path with packet trains (`crate::estimate::CapacityEstimator`): pairs cannot resolve a
    /// receive path that hands packets over in bunches.
    fn wants_trains(&self) -> bool {
        false
    }
    /// The sender began a packet train at `now_us`.
    fn on_train(&mut self, _now_us: u64) {}
    /// What the path was seen to deliver, in packets per second, once the controller has a
    /// settled reading of it (0 before, and for controllers that do not measure it): what path
    /// memory keeps for the next transfer ([`crate::config::ChannelConfig::start_rate_bps`]).
    fn path_rate_pps(&self) -> f64 {
        0.0
    }
    /// Whether the controller competes with a loss-based flow that fills the queue (`adaptive`'s
    /// competitive mode), for traces.
    fn competing(&self) -> bool {
        false
    }
    /// Short name for traces.
    fn name(&self) -> &'static str;
}

/// UDT's equation (1): the packets per SYN to add to the rate when `avail_pps` of bandwidth is
/// estimated available, for packets of `mss_bytes`:
/// `max(10^(ceil(log10 B) - 9), 1/1500) * 1500 / MSS` with B in bits per second.
pub fn udt_increase_pkts(avail_pps: f64, mss_bytes: f64) -> f64 {
    let min_inc = 1.0 / 1500.0;
    let bits = avail_pps * mss_bytes * 8.0;
    let factor =
        if bits > 0.0 { 10f64.powf(bits.log10().ceil() - 9.0).max(min_inc) } else { min_inc };
    factor * 1500.0 / mss_bytes
}

/// Whether the controller `config` builds starts from the rate path memory remembered
/// (`start_rate_bps`): `adaptive` does; a scavenger does not, since it would take a round trip
/// of the link from whoever uses it now.
pub fn starts_from_memory(config: &ChannelConfig) -> bool {
    config.start_rate_bps > 0 && config.cc == CcKind::Adaptive
}

/// Builds the controller `config.cc` names.
pub fn build(config: &ChannelConfig) -> Box<dyn CongestionControl> {
    let packet_bits = (config.packet_size as f64) * 8.0;
    match config.cc {
        CcKind::Udt => Box::new(udt::Udt::new(config.packet_size, config.max_flight_pkts)),
        CcKind::Fixed => Box::new(fixed::Fixed::new(
            config.rate_bps as f64 / packet_bits,
            config.max_flight_pkts,
        )),
        CcKind::Adaptive | CcKind::Low => {
            let (mss, window, rtt) =
                (config.packet_size, config.max_flight_pkts, config.initial_rtt_us);
            let mut cc = match config.cc {
                CcKind::Low => adaptive::Adaptive::scavenger(mss, window, rtt),
                _ => adaptive::Adaptive::new(mss, window, rtt),
            };
            if starts_from_memory(config) {
                cc.start_from(config.start_rate_bps as f64 / packet_bits);
            }
            Box::new(cc)
        }
    }
}
