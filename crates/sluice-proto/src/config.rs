//! Channel configuration shared by the sender and the receiver.

use crate::cc::CcKind;
use crate::crypto::Algorithm;

/// Settings of one data channel. Both ends must agree on `initial_dsn`, `packet_size` and the
/// keys; the session plane negotiates them.
#[derive(Debug, Clone)]
pub struct ChannelConfig {
    /// Largest UDP payload sent, in bytes. The default, 1452, fits a 1500-byte MTU over IPv6.
    pub packet_size: usize,
    /// Congestion controller.
    pub cc: CcKind,
    /// Rate of the `fixed` controller, and a cap for the others when non-zero (bits per second of
    /// UDP payload).
    pub rate_bps: u64,
    /// A floor for the sending rate whatever the controller says, when non-zero (bits per
    /// second of UDP payload): the transfer never paces slower than this (`--min-rate`).
    pub min_rate_bps: u64,
    /// RTT assumed before the first measurement.
    pub initial_rtt_us: u64,
    /// Upper bound on unacknowledged data packets the sender keeps track of (its buffer bound).
    pub max_flight_pkts: u32,
    /// Window the receiver advertises, in packets (its buffer bound).
    pub recv_window_pkts: u32,
    /// Without any packet from the peer for this long, the channel is declared broken.
    pub idle_timeout_us: u64,
    /// Until the first packet from the peer, the wait before the channel is declared broken,
    /// when longer than `idle_timeout_us` ([`ChannelConfig::first_contact_wait_us`]): a sender
    /// that starts before its receiver has planned hears nothing back until the receiver
    /// runs, but once it heard from it, the usual `idle_timeout_us` holds. 0: none.
    pub first_contact_us: u64,
    /// An idle sender sends a keep-alive this often.
    pub keepalive_us: u64,
    /// First data sequence number (31 bits); both ends must use the same.
    pub initial_dsn: u32,
    /// AEAD algorithm.
    pub aead: Algorithm,
    /// Seed for the controller's randomness.
    pub seed: u64,
    /// After a late wake-up the pacer may catch up by this many packets at once. A simulator
    /// wakes exactly on time and needs 1; a real thread woken late needs a few.
    pub max_burst_pkts: u32,
    /// What the path delivered to an earlier transfer (path memory, bits per second of UDP
    /// payload), 0 for none: `adaptive` and `low` start near it instead of probing up from a
    /// few packets, and startup's exits check it within a round trip (see "Path memory" in
    /// `cc/adaptive.md`). A sender's setting only.
    pub start_rate_bps: u64,
    /// Payload bytes the receiver keeps, from the first coded packet on, to rebuild lost packets
    /// from the tail's parity ([`crate::fec`]); the sender codes no further back. 0: no code. Both
    /// ends must agree (the session plane sets it from the transfer's channel count).
    pub tail_code_bytes: u64,
}

impl Default for ChannelConfig {
    fn default() -> Self {
        Self {
            packet_size: 1452,
            cc: CcKind::Adaptive,
            rate_bps: 0,
            min_rate_bps: 0,
            initial_rtt_us: 100_000,
            max_flight_pkts: 1 << 18,
            recv_window_pkts: 1 << 18,
            idle_timeout_us: 30_000_000,
            first_contact_us: 0,
            keepalive_us: 1_000_000,
            initial_dsn: 0,
            aead: Algorithm::Aes256Gcm,
            seed: 0,
            max_burst_pkts: 1,
            start_rate_bps: 0,
            tail_code_bytes: 32 << 20,
        }
    }
}

impl ChannelConfig {
    /// How long the channel waits for the peer's first packet before it is declared broken.
    pub fn first_contact_wait_us(&self) -> u64 {
        self.idle_timeout_us.max(self.first_contact_us)
    }

    /// Smallest packet size accepted: room for the headers, the tag and a little payload.
    pub const MIN_PACKET_SIZE: usize = 128;
    /// Largest packet size accepted (a UDP datagram over IPv4 jumbo frames and then some).
    pub const MAX_PACKET_SIZE: usize = 65_000;

    /// Payload bytes carried by one full data packet.
    pub fn payload_size(&self) -> usize {
        self.packet_size.saturating_sub(crate::wire::DATA_OVERHEAD)
    }

    /// The sending period's bounds in microseconds per packet: at least the period of
    /// `rate_bps` (the cap; 0 without one), at most that of `min_rate_bps` (the floor; infinite
    /// without one). Whatever the controller says is clamped to them.
    pub fn period_bounds_us(&self) -> (f64, f64) {
        let period_of = |bps: u64| 1e6 / (bps as f64 / (self.packet_size as f64 * 8.0));
        let shortest = if self.rate_bps > 0 { period_of(self.rate_bps) } else { 0.0 };
        let longest =
            if self.min_rate_bps > 0 { period_of(self.min_rate_bps) } else { f64::INFINITY };
        (shortest, longest.max(shortest))
    }

    /// Checks the settings; the error names the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(Self::MIN_PACKET_SIZE..=Self::MAX_PACKET_SIZE).contains(&self.packet_size) {
            return Err(ConfigError("packet_size must be between 128 and 65000 bytes"));
        }
        if self.cc == CcKind::Fixed && self.rate_bps == 0 {
            return Err(ConfigError("the fixed controller needs rate_bps"));
        }
        if self.rate_bps > 0 && self.min_rate_bps > self.rate_bps {
            return Err(ConfigError("min_rate_bps must not be above rate_bps"));
        }
        if self.max_flight_pkts < 32 || self.recv_window_pkts < 32 {
            return Err(ConfigError("max_flight_pkts and recv_window_pkts must be at least 32"));
        }
        if self.initial_dsn > crate::seq::Seq31::MAX {
            return Err(ConfigError("initial_dsn must fit in 31 bits"));
        }
        if self.max_burst_pkts == 0 || self.max_burst_pkts > 4096 {
            return Err(ConfigError("max_burst_pkts must be between 1 and 4096"));
        }
        if self.idle_timeout_us < 1_000_000 || self.initial_rtt_us == 0 || self.keepalive_us == 0 {
            return Err(ConfigError("timeouts must be positive (idle timeout at least 1 s)"));
        }
        Ok(())
    }
}

/// A configuration value out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid channel configuration: {0}")]
pub struct ConfigError(pub &'static str);
