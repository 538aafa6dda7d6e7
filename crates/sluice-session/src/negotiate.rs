//! The data channels' specification: the client's proposal, the server's choice within its
//! limits, and the checks on each side (MCDTP's specification handshake).

use sluice_proto::cc::CcKind;
use sluice_proto::config::ChannelConfig;
use sluice_proto::crypto::Algorithm;

use crate::messages::Spec;

/// Data channels per transfer at most, whatever either end asks.
pub const MAX_CHANNELS: u32 = 64;
/// Payload bytes a transfer's receiving end keeps, all its channels together, once they see
/// losses, to rebuild the tail's losses from its parity (`sluice_proto::fec`): at 1 Gbit/s and
/// 300 ms, a round trip of each of two channels' packets and a block more. At most 32 MiB a
/// channel (`ChannelConfig::tail_code_bytes`).
pub const TAIL_CODE_BYTES: u64 = 64 << 20;

/// Names of the AEADs in the handshake.
pub fn cipher_name(alg: Algorithm) -> &'static str {
    match alg {
        Algorithm::Aes256Gcm => "aes-256-gcm",
        Algorithm::ChaCha20Poly1305 => "chacha20-poly1305",
    }
}

/// Parses a name given by [`cipher_name`].
pub fn cipher_from_name(name: &str) -> Option<Algorithm> {
    match name {
        "aes-256-gcm" => Some(Algorithm::Aes256Gcm),
        "chacha20-poly1305" => Some(Algorithm::ChaCha20Poly1305),
        _ => None,
    }
}

/// The specification both ends use for the data channels of a session: what the client
/// proposes in `Hello`, as the server chose it in `Welcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// Data channels per transfer.
    pub channels: u32,
    /// Largest UDP payload of a data packet, in bytes.
    pub packet_size: usize,
    /// The congestion controller.
    pub cc: CcKind,
    /// The data channels' AEAD.
    pub aead: Algorithm,
    /// Rate of the `fixed` controller and a cap for the others when non-zero (bit/s).
    pub rate_bps: u64,
    /// A floor for the sending rate when non-zero (bit/s).
    pub min_rate_bps: u64,
    /// Over TCP: `channels` is a ceiling, and the sender grows the streams carrying data.
    pub grow_streams: bool,
}

impl Negotiated {
    /// The client's proposal from its channel settings and the channel count it offers.
    pub fn proposal(config: &ChannelConfig, channels: u32) -> Spec {
        Spec {
            max_channels: channels.clamp(1, MAX_CHANNELS),
            packet_size: u32::try_from(config.packet_size).unwrap_or(u32::MAX),
            cc: config.cc.name().to_owned(),
            cipher: cipher_name(config.aead).to_owned(),
            rate_bps: config.rate_bps,
            min_rate_bps: config.min_rate_bps,
            grow_streams: false,
        }
    }

    /// Reads a spec from the wire, checking every field; the error is for the peer.
    pub fn from_spec(spec: &Spec) -> Result<Negotiated, String> {
        let cc = CcKind::from_name(&spec.cc)
            .ok_or_else(|| format!("unknown congestion controller {:?}", spec.cc))?;
        let aead = cipher_from_name(&spec.cipher)
            .ok_or_else(|| format!("unknown cipher {:?}", spec.cipher))?;
        if !(1..=MAX_CHANNELS).contains(&spec.max_channels) {
            return Err(format!("max_channels must be between 1 and {MAX_CHANNELS}"));
        }
        let negotiated = Negotiated {
            channels: spec.max_channels,
            packet_size: spec.packet_size as usize,
            cc,
            aead,
            rate_bps: spec.rate_bps,
            min_rate_bps: spec.min_rate_bps,
            grow_streams: spec.grow_streams,
        };
        negotiated.apply(&ChannelConfig::default()).validate().map_err(|e| e.to_string())?;
        Ok(negotiated)
    }

    /// The server's choice: the smaller channel count, the client's rate under the token's
    /// `rate_cap` (a floor above the cap comes down to it), the client's other settings.
    pub fn choose(self, server_max_channels: u32, rate_cap: Option<u64>) -> Negotiated {
        let rate_bps = match (self.rate_bps, rate_cap) {
            (0, Some(cap)) => cap,
            (rate, Some(cap)) => rate.min(cap),
            (rate, None) => rate,
        };
        Negotiated {
            channels: self.channels.min(server_max_channels.max(1)),
            rate_bps,
            min_rate_bps: if rate_bps == 0 {
                self.min_rate_bps
            } else {
                self.min_rate_bps.min(rate_bps)
            },
            ..self
        }
    }

    /// As the wire carries it.
    pub fn to_spec(self) -> Spec {
        Spec {
            max_channels: self.channels,
            packet_size: u32::try_from(self.packet_size).unwrap_or(u32::MAX),
            cc: self.cc.name().to_owned(),
            cipher: cipher_name(self.aead).to_owned(),
            rate_bps: self.rate_bps,
            min_rate_bps: self.min_rate_bps,
            grow_streams: self.grow_streams,
        }
    }

    /// `base` with the negotiated fields, and each channel's share of [`TAIL_CODE_BYTES`].
    pub fn apply(&self, base: &ChannelConfig) -> ChannelConfig {
        let tail_code = TAIL_CODE_BYTES / u64::from(self.channels.max(1));
        ChannelConfig {
            tail_code_bytes: tail_code.min(base.tail_code_bytes),
            packet_size: self.packet_size,
            cc: self.cc,
            rate_bps: self.rate_bps,
            min_rate_bps: self.min_rate_bps,
            aead: self.aead,
            ..base.clone()
        }
    }
}
