//! Adapters that attach a `sluice-proto` sender or receiver to the simulator as an [`Endpoint`].
//!
//! The payload is a deterministic function of the seed and the byte offset, so the receiver
//! verifies every delivered byte without keeping a copy. Both ends also check the packet-number
//! rule on every datagram they emit: numbers under one key are strictly increasing, so none is
//! ever reused (the header carrying it is authenticated but not encrypted, so it can be read).

use std::sync::Arc;

use sluice_proto::cc::coupled::CouplingGroup;
use sluice_proto::config::ChannelConfig;
use sluice_proto::crypto::PacketKey;
use sluice_proto::intervals::IntervalSet;
use sluice_proto::receiver::{Receiver, State};
use sluice_proto::rng::Rng;
use sluice_proto::sender::Sender;
use sluice_proto::wire::Header;

use crate::Endpoint;

/// The byte at `pos` of the test payload for `seed`.
fn payload_word(seed: u64, word_index: u64) -> u64 {
    Rng::new(seed ^ word_index.wrapping_mul(0x9E37_79B9_7F4A_7C15)).next_u64()
}

/// Writes the test payload for `seed` at `offset` into `dst`.
pub fn fill_payload(seed: u64, offset: u64, dst: &mut [u8]) {
    let mut pos = offset;
    let mut i = 0;
    while i < dst.len() {
        let word = payload_word(seed, pos / 8).to_le_bytes();
        let skip = (pos % 8) as usize;
        let n = (8 - skip).min(dst.len() - i);
        dst[i..i + n].copy_from_slice(&word[skip..skip + n]);
        i += n;
        pos += n as u64;
    }
}

/// Whether `data` equals the test payload for `seed` at `offset`.
pub fn payload_matches(seed: u64, offset: u64, data: &[u8]) -> bool {
    let mut expected = [0u8; 2048];
    data.chunks(expected.len()).enumerate().all(|(k, chunk)| {
        let exp = &mut expected[..chunk.len()];
        fill_payload(seed, offset + (k * 2048) as u64, exp);
        exp == chunk
    })
}

/// Test keys for one channel: (sender to receiver, receiver to sender), distinct per seed.
pub fn test_keys(config: &ChannelConfig, seed: u64) -> [(PacketKey, PacketKey); 2] {
    let key = |dir: u64| {
        let mut rng = Rng::new(seed ^ (dir << 56) ^ 0x5EED);
        let mut k = [0u8; 32];
        k.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
        let mut iv = [0u8; 12];
        iv.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
        PacketKey::new(config.aead, &k, iv)
    };
    [(key(1), key(2)), (key(2), key(1))]
}

/// Checks that packet numbers under one key only ever increase.
#[derive(Debug, Default, Clone)]
pub struct PnCheck {
    last: Option<u64>,
    /// Datagrams checked.
    pub checked: u64,
    /// Datagrams whose packet number did not exceed the previous one (must stay 0).
    pub violations: u64,
}

impl PnCheck {
    fn observe(&mut self, datagram: &[u8]) {
        self.checked += 1;
        match Header::parse(datagram) {
            Ok(h) if self.last.is_none_or(|l| h.pn > l) => self.last = Some(h.pn),
            _ => self.violations += 1,
        }
    }
}

/// A sender's place in a [`CouplingGroup`]: the adapter plays the transfer driver's part and
/// sets the channel inactive once it has no new data left or has ended.
#[derive(Debug)]
pub struct Coupling {
    /// The transfer's group.
    pub group: Arc<CouplingGroup>,
    /// This channel's index in the group.
    pub channel: usize,
    /// Whether the channel still counts as active.
    pub active: bool,
}

/// The data source side of a simulated channel.
#[derive(Debug)]
pub struct SenderEnd {
    /// The protocol state machine.
    pub sender: Sender,
    /// Seed of the payload bytes.
    pub payload_seed: u64,
    /// Packet-number check over everything this end emitted.
    pub pn_check: PnCheck,
    /// The coupling group the sender's controller belongs to, if any.
    pub coupling: Option<Coupling>,
}

impl SenderEnd {
    /// Sets the channel inactive in its group once every byte has been sent at least once, or
    /// the channel has ended.
    fn update_coupling(&mut self) {
        if let Some(c) = &mut self.coupling
            && c.active
            && (self.sender.unsent_bytes() == 0 || self.sender.state() != State::Open)
        {
            c.group.set_active(c.channel, false);
            c.active = false;
        }
    }
}

/// The sink side of a simulated channel.
#[derive(Debug)]
pub struct ReceiverEnd {
    /// The protocol state machine.
    pub receiver: Receiver,
    /// Seed of the payload bytes.
    pub payload_seed: u64,
    /// First byte of the application's data this channel carries.
    pub offset: u64,
    /// Bytes expected in total (from `offset` on).
    pub total_bytes: u64,
    /// Byte ranges delivered so far.
    pub delivered: IntervalSet,
    /// Payloads delivered twice (must stay 0).
    pub duplicate_deliveries: u64,
    /// Payloads whose bytes did not match (must stay 0: the AEAD rejects corruption).
    pub corrupt_deliveries: u64,
    /// When the last missing byte arrived.
    pub completed_us: Option<u64>,
    /// Packet-number check over everything this end emitted.
    pub pn_check: PnCheck,
}

/// Either end of a simulated channel.
#[derive(Debug)]
pub enum ChannelEndpoint {
    /// Data source (both ends boxed: each is over a kilobyte of state, and they differ by
    /// hundreds of bytes).
    Sender(Box<SenderEnd>),
    /// Data sink.
    Receiver(Box<ReceiverEnd>),
}

/// Builds the two ends of a channel that moves `total_bytes` starting at `now_us`.
pub fn channel_pair(
    config: &ChannelConfig,
    key_seed: u64,
    payload_seed: u64,
    total_bytes: u64,
    now_us: u64,
) -> Result<(ChannelEndpoint, ChannelEndpoint), sluice_proto::config::ConfigError> {
    channel_pair_part(config, None, key_seed, payload_seed, 0..total_bytes, now_us)
}

/// Builds the two ends of a channel that moves the bytes `range` of the payload for
/// `payload_seed` (one stripe of a file the channels of a transfer share), starting at `now_us`.
/// With `coupling = Some((group, channel))` the sender's controller is that member of the group
/// and the adapter sets it inactive when its data runs out; otherwise it runs `config.cc` alone.
pub fn channel_pair_part(
    config: &ChannelConfig,
    coupling: Option<(&Arc<CouplingGroup>, usize)>,
    key_seed: u64,
    payload_seed: u64,
    range: std::ops::Range<u64>,
    now_us: u64,
) -> Result<(ChannelEndpoint, ChannelEndpoint), sluice_proto::config::ConfigError> {
    let [(s_tx, s_rx), (r_tx, r_rx)] = test_keys(config, key_seed);
    let mut sender = match coupling {
        Some((group, channel)) => {
            Sender::with_controller(config.clone(), group.member(channel), s_tx, s_rx, now_us)?
        }
        None => Sender::new(config.clone(), s_tx, s_rx, now_us)?,
    };
    sender.push(range.start, range.end - range.start);
    sender.finish();
    let receiver = Receiver::new(config.clone(), r_tx, r_rx, now_us)?;
    let coupling = coupling.map(|(group, channel)| Coupling {
        group: Arc::clone(group),
        channel,
        active: true,
    });
    let mut end = SenderEnd { sender, payload_seed, pn_check: PnCheck::default(), coupling };
    end.update_coupling();
    Ok((
        ChannelEndpoint::Sender(Box::new(end)),
        ChannelEndpoint::Receiver(Box::new(ReceiverEnd {
            receiver,
            payload_seed,
            offset: range.start,
            total_bytes: range.end - range.start,
            delivered: IntervalSet::new(),
            duplicate_deliveries: 0,
            corrupt_deliveries: 0,
            completed_us: None,
            pn_check: PnCheck::default(),
        })),
    ))
}

impl ChannelEndpoint {
    /// The sender side, if this is one.
    pub fn as_sender(&self) -> Option<&SenderEnd> {
        match self {
            ChannelEndpoint::Sender(s) => Some(s.as_ref()),
            ChannelEndpoint::Receiver(_) => None,
        }
    }

    /// The receiver side, if this is one.
    pub fn as_receiver(&self) -> Option<&ReceiverEnd> {
        match self {
            ChannelEndpoint::Receiver(r) => Some(r.as_ref()),
            ChannelEndpoint::Sender(_) => None,
        }
    }
}

impl ReceiverEnd {
    /// Takes a payload the receiver delivered (arrived or rebuilt): counts it, checks it.
    fn deliver(&mut self, now_us: u64, offset: u64, payload: &[u8]) {
        let len = payload.len() as u64;
        if self.delivered.insert(offset, offset + len - 1) != len {
            self.duplicate_deliveries += 1;
        }
        if !payload_matches(self.payload_seed, offset, payload) {
            self.corrupt_deliveries += 1;
        }
        if self.completed_us.is_none() && self.delivered.len() >= self.total_bytes {
            self.completed_us = Some(now_us);
        }
    }

    /// Whether every byte of the channel's range arrived exactly once and intact.
    pub fn delivered_ok(&self) -> bool {
        self.delivered.len() == self.total_bytes
            && self.delivered.range_count() <= 1
            && (self.total_bytes == 0 || self.delivered.first() == Some(self.offset))
            && self.duplicate_deliveries == 0
            && self.corrupt_deliveries == 0
    }
}

impl Endpoint for ChannelEndpoint {
    fn handle_datagram(&mut self, now_us: u64, datagram: &mut [u8]) {
        match self {
            ChannelEndpoint::Sender(s) => {
                s.sender.handle_datagram(now_us, datagram);
                s.update_coupling();
            }
            ChannelEndpoint::Receiver(r) => {
                if let Ok(Some(d)) = r.receiver.handle_datagram(now_us, datagram) {
                    r.deliver(now_us, d.offset, &datagram[d.range.clone()]);
                }
                while let Some(rebuilt) = r.receiver.poll_recovered() {
                    r.deliver(now_us, rebuilt.offset, &rebuilt.payload);
                }
            }
        }
    }

    fn handle_timeout(&mut self, now_us: u64) {
        match self {
            ChannelEndpoint::Sender(s) => {
                s.sender.handle_timeout(now_us);
                s.update_coupling();
            }
            ChannelEndpoint::Receiver(r) => r.receiver.handle_timeout(now_us),
        }
    }

    fn poll_transmit(&mut self, now_us: u64, buf: &mut [u8]) -> Option<usize> {
        match self {
            ChannelEndpoint::Sender(s) => {
                let seed = s.payload_seed;
                let mut fill = |offset: u64, dst: &mut [u8]| fill_payload(seed, offset, dst);
                let sent = s.sender.poll_transmit(now_us, buf, &mut fill);
                s.update_coupling();
                let len = sent?;
                s.pn_check.observe(&buf[..len]);
                Some(len)
            }
            ChannelEndpoint::Receiver(r) => {
                let len = r.receiver.poll_transmit(now_us, buf)?;
                r.pn_check.observe(&buf[..len]);
                Some(len)
            }
        }
    }

    fn poll_timeout(&self) -> Option<u64> {
        match self {
            ChannelEndpoint::Sender(s) => s.sender.poll_timeout(),
            ChannelEndpoint::Receiver(r) => r.receiver.poll_timeout(),
        }
    }

    fn is_done(&self) -> bool {
        match self {
            ChannelEndpoint::Sender(s) => s.sender.state() != State::Open,
            ChannelEndpoint::Receiver(r) => {
                r.completed_us.is_some() || r.receiver.state() != State::Open
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_is_deterministic_at_any_alignment() {
        let mut whole = vec![0u8; 100];
        fill_payload(7, 3, &mut whole);
        let mut part = vec![0u8; 37];
        fill_payload(7, 3 + 41, &mut part);
        assert_eq!(&whole[41..78], &part[..]);
        assert!(payload_matches(7, 3, &whole));
        whole[50] ^= 1;
        assert!(!payload_matches(7, 3, &whole));
        assert!(!payload_matches(8, 3, &part));
    }
}
