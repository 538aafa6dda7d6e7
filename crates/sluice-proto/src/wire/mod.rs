//! The wire format: zero-copy views and validated structs, `parse`/`emit`, never a panic.
//!
//! Two layers, as in smoltcp:
//! - zero-copy views ([`Packet`] over a whole datagram, [`DataBody`] over a plaintext data body)
//!   whose accessors read fields at the byte ranges named in [`field`];
//! - validated structs ([`Header`], [`DataPrefix`], [`Control`]) with `parse` and `emit`.
//!
//! `parse` accepts exactly what `emit` can write: every value that parses re-emits to the same
//! bytes, and `emit` refuses (with [`WireError::Malformed`]) a value that `parse` would reject.
//! Parsing never panics and never allocates; input from the network is hostile.
//!
//! A datagram is a header, then the body sealed by [`crate::crypto::PacketKey`]:
//!
//! ```text
//! +--------------------+------------------------------+-------------+
//! | header (16 bytes)  | body (encrypted)             | tag (16)    |
//! | AEAD assoc. data   | plaintext layout per kind    | AEAD tag    |
//! +--------------------+------------------------------+-------------+
//! ```
//!
//! All integers are big-endian. Sequence numbers ([`Seq31`]) are 31 bits; the top bit of their
//! 32-bit field must be zero (in a NAK it is the range flag).
//!
//! # Header (16 bytes, authenticated, not encrypted)
//!
//! | bytes  | field          | notes                                                          |
//! |--------|----------------|----------------------------------------------------------------|
//! | 0      | kind           | 0 data, 1 ack, 2 ack2, 3 nak, 4 keep-alive, 5 shutdown, 6 drop-request, 7 probe, 8 probe-ack, 9 parity; else `UnknownKind` |
//! | 1      | flags          | data only: [`flags::PAIR_FIRST`] 1, [`flags::PAIR_SECOND`] 2, both a train's middle ([`flags::TRAIN`]), [`flags::RETRANSMIT`] 4; other bits, or any bit on a control kind: `Malformed` |
//! | 2..4   | reserved       | zero, else `Malformed`                                         |
//! | 4..12  | packet number  | u64; AEAD nonce input, never reused under one key              |
//! | 12..16 | timestamp_us   | u32, microseconds on the sender's clock, wrapping              |
//!
//! # Data body (kind 0): 12 + payload bytes
//!
//! | bytes  | field   | notes                                                  |
//! |--------|---------|--------------------------------------------------------|
//! | 0..4   | dsn     | u32, top bit zero; reused when the payload is resent   |
//! | 4..12  | offset  | u64, where the payload belongs in the byte space       |
//! | 12..   | payload | at least one byte                                      |
//!
//! # ACK body (kind 1): exactly 44 bytes
//!
//! | bytes  | field              | notes                                          |
//! |--------|--------------------|------------------------------------------------|
//! | 0..4   | ack_no             | u32, echoed by ACK2                            |
//! | 4..8   | ack_dsn            | u32, top bit zero; all before it are received  |
//! | 8..12  | rtt_us             | u32                                            |
//! | 12..16 | rtt_var_us         | u32                                            |
//! | 16..20 | avail_window_pkts  | u32                                            |
//! | 20..24 | recv_rate_pps      | u32, UDT's median-filtered arrival speed       |
//! | 24..28 | capacity_pps       | u32                                            |
//! | 28..32 | queue_delay_us     | u32, least one-way delay above its minimum     |
//! | 32..36 | rcv_next_dsn       | u32, top bit zero; one past the largest seen   |
//! | 36..40 | missing_pkts       | u32, holes before rcv_next_dsn                 |
//! | 40..44 | delivery_rate_pps  | u32, packets delivered per second over ≥ 40 ms |
//!
//! # ACK2 body (kind 2): exactly 4 bytes
//!
//! | bytes | field  | notes                    |
//! |-------|--------|--------------------------|
//! | 0..4  | ack_no | u32, the ACK it answers  |
//!
//! # NAK body (kind 3): 4·n bytes, n ≥ 1
//!
//! UDT's compressed loss list (the paper's appendix): a sequence of u32 entries.
//!
//! | entry                   | meaning                                                      |
//! |-------------------------|--------------------------------------------------------------|
//! | `0x8000_0000 \| lo`, `hi` | lost `lo..=hi`; `hi` is 1 to 2^30 − 1 after `lo` on the 31-bit circle |
//! | `v` (top bit zero)      | lost `v` alone                                               |
//!
//! Rejected: an empty body (`Truncated`), a length not a multiple of 4, a flagged entry last or
//! followed by another flagged entry, and a range whose end is equal to, before, or 2^30 or more
//! after its start (a one-number range must be a single entry, so each list has one encoding).
//! Ranges may wrap: `0x8000_0000 | 0x7FFF_FFFE`, `0x0000_0001` is `0x7FFF_FFFE..=1`.
//!
//! # Keep-alive body (kind 4): empty
//!
//! # Shutdown body (kind 5): exactly 4 bytes
//!
//! | bytes | field  | notes                            |
//! |-------|--------|----------------------------------|
//! | 0..4  | reason | u32, application-defined         |
//!
//! # Drop-request body (kind 6): exactly 8 bytes
//!
//! | bytes | field | notes                                                        |
//! |-------|-------|--------------------------------------------------------------|
//! | 0..4  | first | u32, top bit zero                                            |
//! | 4..8  | last  | u32, top bit zero; equal to `first` or less than 2^30 after it |
//!
//! # Probe body (kind 7): 4 + padding bytes
//!
//! | bytes | field   | notes                                                             |
//! |-------|---------|-------------------------------------------------------------------|
//! | 0..4  | id      | u32, echoed by the probe-ack                                      |
//! | 4..   | padding | zero bytes, any number, else `Malformed`: they make the datagram as large as the size tried |
//!
//! # Probe-ack body (kind 8): exactly 4 bytes
//!
//! | bytes | field | notes                        |
//! |-------|-------|------------------------------|
//! | 0..4  | id    | u32, the probe it answers    |
//!
//! # Parity body (kind 9): 16 + half-parity bytes
//!
//! Half of one parity of the tail's erasure code ([`crate::fec`]).
//!
//! | bytes  | field    | notes                                                             |
//! |--------|----------|-------------------------------------------------------------------|
//! | 0..4   | from     | u32, top bit zero: the first data sequence number the block codes |
//! | 4..8   | count    | u32, packets coded from `from` on, 1 to `side`², within one block |
//! | 8..10  | side     | u16, the block's side, [`crate::fec::SIDE`]; else `Malformed`     |
//! | 10     | family   | 0 rows, 1 columns, 2 diagonals                                    |
//! | 11     | half     | 0 or 1                                                            |
//! | 12..14 | index    | u16, below `side`                                                 |
//! | 14..16 | reserved | zero                                                              |
//! | 16..   | bytes    | the half parity, at least one byte                                |
//!
//! Trailing bytes after a fixed-size body are `Malformed`; a body shorter than its fixed part is
//! `Truncated`.

use crate::seq::Seq31;

mod control;
mod data;
pub mod field;
mod header;
mod nak;
mod parity;
#[cfg(test)]
mod tests;

pub use control::{Ack, Control};
pub use data::{DataBody, DataPrefix};
pub use header::{Header, Packet};
pub use nak::{NakRanges, emit_nak};
pub use parity::ParityPrefix;

/// Bytes of the packet header.
pub const HEADER_LEN: usize = 16;
/// Bytes of the AEAD tag that follows the body.
pub const TAG_LEN: usize = 16;
/// Bytes of the data body before the payload (sequence number and offset).
pub const DATA_PREFIX_LEN: usize = 12;
/// Bytes of the whole packet that are not payload, for a data packet.
pub const DATA_OVERHEAD: usize = HEADER_LEN + DATA_PREFIX_LEN + TAG_LEN;
/// Bytes of an ACK body.
pub const ACK_LEN: usize = 44;

/// Data packet flags.
pub mod flags {
    /// First packet of a packet pair (sent back to back with the next).
    pub const PAIR_FIRST: u8 = 1;
    /// Second packet of a packet pair.
    pub const PAIR_SECOND: u8 = 2;
    /// A packet train's middle packet (both pair bits): a train is a `PAIR_FIRST`, middles, and
    /// a `PAIR_SECOND`, back to back (`crate::estimate::CapacityEstimator`). Protocol 10 on
    /// (`sluice::session::PROTOCOL_VERSION`); before, both bits were malformed.
    pub const TRAIN: u8 = PAIR_FIRST | PAIR_SECOND;
    /// The payload was sent before under another packet number.
    pub const RETRANSMIT: u8 = 4;
    /// The sender adds this packet to the tail's erasure code (`crate::fec`): the receiver keeps
    /// its payload, and every later one's, for rebuilding. Protocol 13 on
    /// (`sluice::session::PROTOCOL_VERSION`).
    pub const CODED: u8 = 8;
    /// Every flag bit the format defines; any other bit is malformed.
    pub const ALL: u8 = PAIR_FIRST | PAIR_SECOND | RETRANSMIT | CODED;
}

/// Why a datagram was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than its fixed part.
    #[error("packet truncated")]
    Truncated,
    /// Unknown packet kind byte.
    #[error("unknown packet kind {0}")]
    UnknownKind(u8),
    /// A field holds a value the format forbids.
    #[error("malformed packet: {0}")]
    Malformed(&'static str),
    /// The output buffer cannot hold the packet.
    #[error("buffer too small")]
    BufferTooSmall,
}

/// Packet kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Payload.
    Data = 0,
    /// Selective acknowledgement, sent every SYN.
    Ack = 1,
    /// Acknowledgement of an ACK, for RTT.
    Ack2 = 2,
    /// Loss report.
    Nak = 3,
    /// Liveness when idle.
    KeepAlive = 4,
    /// Orderly close.
    Shutdown = 5,
    /// The sender will not send a range again.
    DropRequest = 6,
    /// A datagram of a size to try, from the sender: does the path carry it?
    Probe = 7,
    /// The receiver got that probe.
    ProbeAck = 8,
    /// Half a parity of the tail's erasure code ([`crate::fec`]). Protocol 12 on.
    Parity = 9,
}

impl Kind {
    /// Every kind, in wire order.
    pub const ALL: [Kind; 10] = [
        Kind::Data,
        Kind::Ack,
        Kind::Ack2,
        Kind::Nak,
        Kind::KeepAlive,
        Kind::Shutdown,
        Kind::DropRequest,
        Kind::Probe,
        Kind::ProbeAck,
        Kind::Parity,
    ];

    /// The kind for a wire byte, or `UnknownKind`.
    pub fn from_u8(byte: u8) -> Result<Kind, WireError> {
        Kind::ALL.get(usize::from(byte)).copied().ok_or(WireError::UnknownKind(byte))
    }

    /// `true` for every kind but [`Kind::Data`] (a parity packet, like a control packet, has
    /// no flags).
    pub fn is_control(self) -> bool {
        self != Kind::Data
    }
}

impl TryFrom<u8> for Kind {
    type Error = WireError;
    fn try_from(byte: u8) -> Result<Kind, WireError> {
        Kind::from_u8(byte)
    }
}

impl From<Kind> for u8 {
    fn from(kind: Kind) -> u8 {
        kind as u8
    }
}

/// The top bit of a 32-bit sequence field: the NAK range flag, zero everywhere else.
const SEQ_FLAG: u32 = 1 << 31;
/// Ranges and drop-requests span less than half the 31-bit circle, so "after" is unambiguous.
const HALF_CIRCLE: u32 = 1 << 30;

/// `b - a` going forward on the 31-bit circle, in `[0, 2^31)`.
fn forward_distance(a: Seq31, b: Seq31) -> u32 {
    b.get().wrapping_sub(a.get()) & Seq31::MAX
}

/// The 32-bit field for a sequence number, flag bit clear (whatever `Seq31`'s internals do).
fn seq_bits(seq: Seq31) -> u32 {
    seq.get() & !SEQ_FLAG
}

/// Reads a sequence number field at `at` whose top bit must be zero.
fn read_seq(buf: &[u8], at: usize, what: &'static str) -> Result<Seq31, WireError> {
    let raw = read_u32(buf, at);
    if raw & SEQ_FLAG != 0 {
        return Err(WireError::Malformed(what));
    }
    Ok(Seq31::new(raw))
}

/// Reads the big-endian u16 at `at`; the caller has checked that `buf` holds it.
fn read_u16(buf: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([buf[at], buf[at + 1]])
}

/// Reads the big-endian u32 at `at`; the caller has checked that `buf` holds it.
fn read_u32(buf: &[u8], at: usize) -> u32 {
    let mut bytes = [0; 4];
    bytes.copy_from_slice(&buf[at..at + 4]);
    u32::from_be_bytes(bytes)
}

/// Reads the big-endian u64 at `at`; the caller has checked that `buf` holds it.
fn read_u64(buf: &[u8], at: usize) -> u64 {
    let mut bytes = [0; 8];
    bytes.copy_from_slice(&buf[at..at + 8]);
    u64::from_be_bytes(bytes)
}

/// Writes `v` big-endian at `at`; the caller has checked that `buf` holds it.
fn write_u16(buf: &mut [u8], at: usize, v: u16) {
    buf[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes `v` big-endian at `at`; the caller has checked that `buf` holds it.
fn write_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// Writes `v` big-endian at `at`; the caller has checked that `buf` holds it.
fn write_u64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_be_bytes());
}
