//! The wire format: zero-copy views and validated structs, `parse`/`emit`, never a panic.
//!
//! CONTRACT STUB: helper 2 replaces the bodies (and may add submodules); the public items named
//! here are fixed, with the byte layout below.
//!
//! ```text
//! header, 16 bytes, authenticated (AEAD associated data), not encrypted:
//!   0      kind (0 data, 1 ack, 2 ack2, 3 nak, 4 keep-alive, 5 shutdown, 6 drop-request)
//!   1      flags (data only: PAIR_FIRST, PAIR_SECOND, RETRANSMIT; zero on control packets)
//!   2..4   reserved, zero
//!   4..12  packet number, u64 big-endian (AEAD nonce input; never reused under one key)
//!   12..16 timestamp, u32 big-endian, microseconds on the sender's clock, wrapping
//! body: encrypted plaintext body, then a 16-byte AEAD tag
//! ```

use crate::seq::Seq31;

/// Bytes of the packet header.
pub const HEADER_LEN: usize = 16;
/// Bytes of the AEAD tag that follows the body.
pub const TAG_LEN: usize = 16;
/// Bytes of the data body before the payload (sequence number and offset).
pub const DATA_PREFIX_LEN: usize = 12;
/// Bytes of the whole packet that are not payload, for a data packet.
pub const DATA_OVERHEAD: usize = HEADER_LEN + DATA_PREFIX_LEN + TAG_LEN;

/// Data packet flags.
pub mod flags {
    /// First packet of a packet pair (sent back to back with the next).
    pub const PAIR_FIRST: u8 = 1;
    /// Second packet of a packet pair.
    pub const PAIR_SECOND: u8 = 2;
    /// The payload was sent before under another packet number.
    pub const RETRANSMIT: u8 = 4;
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
}

/// The validated packet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Packet kind.
    pub kind: Kind,
    /// Flags (data packets only).
    pub flags: u8,
    /// Packet number: unique per key.
    pub pn: u64,
    /// Sender's clock in microseconds, wrapping.
    pub timestamp_us: u32,
}

impl Header {
    /// Parses the first `HEADER_LEN` bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Header, WireError> {
        let _ = buf;
        unimplemented!()
    }
    /// Writes the header into the first `HEADER_LEN` bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let _ = buf;
        unimplemented!()
    }
}

/// The part of a data body before the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataPrefix {
    /// Data sequence number (reused when the payload is retransmitted).
    pub dsn: Seq31,
    /// Where the payload belongs in the application's byte space.
    pub offset: u64,
}

impl DataPrefix {
    /// Parses a plaintext data body into its prefix and payload (payload may not be empty).
    pub fn parse(body: &[u8]) -> Result<(DataPrefix, &[u8]), WireError> {
        let _ = body;
        unimplemented!()
    }
    /// Writes the prefix into the first `DATA_PREFIX_LEN` bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let _ = buf;
        unimplemented!()
    }
}

/// ACK body: what the receiver tells the sender every SYN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// ACK number, echoed by ACK2.
    pub ack_no: u32,
    /// Every sequence number before this one has been received.
    pub ack_dsn: Seq31,
    /// Receiver's smoothed RTT.
    pub rtt_us: u32,
    /// Receiver's RTT variance.
    pub rtt_var_us: u32,
    /// Packets the receiver can still accept.
    pub avail_window_pkts: u32,
    /// Packet arrival speed (median filter).
    pub recv_rate_pps: u32,
    /// Link capacity estimate from packet pairs.
    pub capacity_pps: u32,
}

/// Validated NAK body: an iterator of inclusive lost ranges.
#[derive(Debug, Clone)]
pub struct NakRanges<'a> {
    body: &'a [u8],
}

impl<'a> Iterator for NakRanges<'a> {
    type Item = (Seq31, Seq31);
    fn next(&mut self) -> Option<Self::Item> {
        let _ = self.body;
        unimplemented!()
    }
}

/// Writes as many of `ranges` as fit in `buf` in UDT's compressed form; returns
/// `(bytes written, ranges written)`.
pub fn emit_nak(ranges: impl Iterator<Item = (Seq31, Seq31)>, buf: &mut [u8]) -> (usize, usize) {
    let _ = (ranges, buf);
    unimplemented!()
}

/// A parsed control packet body.
#[derive(Debug, Clone)]
pub enum Control<'a> {
    /// See [`Ack`].
    Ack(Ack),
    /// Echo of an ACK number.
    Ack2 {
        /// The ACK being acknowledged.
        ack_no: u32,
    },
    /// Loss report.
    Nak(NakRanges<'a>),
    /// Liveness.
    KeepAlive,
    /// Orderly close.
    Shutdown {
        /// Application-defined reason code.
        reason: u32,
    },
    /// The sender gave up on `first..=last`.
    DropRequest {
        /// First sequence number dropped.
        first: Seq31,
        /// Last sequence number dropped.
        last: Seq31,
    },
}

impl<'a> Control<'a> {
    /// Parses a plaintext control body of the given kind (`Kind::Data` is an error).
    pub fn parse(kind: Kind, body: &'a [u8]) -> Result<Self, WireError> {
        let _ = (kind, body);
        unimplemented!()
    }
    /// This packet's kind.
    pub fn kind(&self) -> Kind {
        unimplemented!()
    }
    /// Writes the plaintext body into `buf`; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let _ = buf;
        unimplemented!()
    }
}
