//! Byte ranges of every fixed field, relative to the start of the header or of the body.
//!
//! The tables in the [`wire`](super) module docs and these constants describe the same layout;
//! the parsers, emitters and views read and write only through these names.

use core::ops::{Range, RangeFrom};

/// A fixed-size field.
pub type Field = Range<usize>;
/// The variable-size rest of a packet or body.
pub type Rest = RangeFrom<usize>;

/// Header: packet kind byte.
pub const KIND: usize = 0;
/// Header: flags byte.
pub const FLAGS: usize = 1;
/// Header: reserved, zero.
pub const RESERVED: Field = 2..4;
/// Header: packet number, u64.
pub const PN: Field = 4..12;
/// Header: sender timestamp in microseconds, u32.
pub const TIMESTAMP: Field = 12..16;
/// Datagram: everything after the header (sealed body and tag, or plaintext once opened).
pub const BODY: Rest = 16..;

/// Data body: data sequence number, u32 with the top bit zero.
pub const DSN: Field = 0..4;
/// Data body: byte offset of the payload, u64.
pub const OFFSET: Field = 4..12;
/// Data body: the payload.
pub const PAYLOAD: Rest = 12..;

/// ACK body: ACK number.
pub const ACK_NO: Field = 0..4;
/// ACK body: cumulative acknowledgement, u32 with the top bit zero.
pub const ACK_DSN: Field = 4..8;
/// ACK body: smoothed RTT in microseconds.
pub const ACK_RTT: Field = 8..12;
/// ACK body: RTT variance in microseconds.
pub const ACK_RTT_VAR: Field = 12..16;
/// ACK body: free receive window in packets.
pub const ACK_AVAIL_WINDOW: Field = 16..20;
/// ACK body: packet arrival rate in packets per second.
pub const ACK_RECV_RATE: Field = 20..24;
/// ACK body: link capacity estimate in packets per second.
pub const ACK_CAPACITY: Field = 24..28;
/// ACK body: forward queuing delay in microseconds.
pub const ACK_QUEUE_DELAY: Field = 28..32;
/// ACK body: one past the largest sequence number received, u32 with the top bit zero.
pub const ACK_RCV_NEXT: Field = 32..36;
/// ACK body: packets missing before it.
pub const ACK_MISSING: Field = 36..40;
/// ACK body: packets delivered per second over the last tens of milliseconds.
pub const ACK_DELIVERY_RATE: Field = 40..44;

/// ACK2 body: the ACK number it echoes.
pub const ACK2_ACK_NO: Field = 0..4;

/// Shutdown body: reason code.
pub const SHUTDOWN_REASON: Field = 0..4;

/// Drop-request body: first dropped sequence number.
pub const DROP_FIRST: Field = 0..4;
/// Drop-request body: last dropped sequence number.
pub const DROP_LAST: Field = 4..8;

/// Probe body: its id (zero padding follows).
pub const PROBE_ID: Field = 0..4;

/// Probe-ack body: the id of the probe it answers.
pub const PROBE_ACK_ID: Field = 0..4;

/// Parity body: the first data sequence number the block's parities code, u32 with the top
/// bit zero.
pub const PARITY_FROM: Field = 0..4;
/// Parity body: packets coded, from `from` on, within its block.
pub const PARITY_COUNT: Field = 4..8;
/// Parity body: the block's side, u16 ([`crate::fec::SIDE`]).
pub const PARITY_SIDE: Field = 8..10;
/// Parity body: the family of the parity (0 rows, 1 columns, 2 diagonals).
pub const PARITY_FAMILY: usize = 10;
/// Parity body: which half of the parity this is (0 or 1).
pub const PARITY_HALF: usize = 11;
/// Parity body: the parity's index in its family, u16.
pub const PARITY_INDEX: Field = 12..14;
/// Parity body: reserved, zero.
pub const PARITY_RESERVED: Field = 14..16;
/// Parity body: the half parity's bytes.
pub const PARITY_BYTES: Rest = 16..;

/// NAK body: bytes of one entry.
pub const NAK_ENTRY_LEN: usize = 4;
