//! The records of a TCP data stream, each sealed on its own:
//!
//! ```text
//! | length u32 BE | header (16) | body | tag (16) |
//! ```
//!
//! `length` counts header, body and tag. The header is `sluice-proto`'s packet header (kind,
//! packet number, timestamp), so a stream seals with the same [`PacketKey`] as a UDP channel:
//! the header is the associated data and its packet number the nonce. Here the packet number is
//! the direction's record counter, from 0 up: a record is accepted only with the next number,
//! so a replayed, dropped or reordered record fails the stream, and an altered one fails
//! authentication. The length travels in the clear: a wrong one splits the stream at the wrong
//! place, which fails authentication too (or the length bound).
//!
//! Bodies by kind (big-endian):
//! - `Data`: offset u64 (with [`COMPRESSED`](super::super::compress) set for a compressed frame),
//!   then the payload: at most [`RECORD_DATA_BYTES`], never empty.
//! - `Ack` (receiver): the payload bytes of this stream written to the store so far u64, then
//!   the send buffer the receiver asks the sender for u64 (0: no advice; [`super::buffers`]).
//! - `Ack2` (sender): the timestamp of the last `Ack` heard u32, echoed for the receiver's
//!   round trip.
//! - `KeepAlive`: empty.
//! - `Shutdown`: a reason u32 ([`REASON_DONE`], [`REASON_CANCELLED`], [`REASON_BROKEN`]).

use std::ops::Range;

use sluice_proto::crypto::{CryptoError, PacketKey};
use sluice_proto::wire::{HEADER_LEN, Header, Kind, TAG_LEN};

use super::super::DataError;
use sluice_session::compress::COMPRESS_BLOCK_BYTES;

/// Bytes of the length before each record.
pub(super) const LEN_BYTES: usize = 4;
/// The most payload one data record carries: one compression piece, so a frame is one record.
pub const RECORD_DATA_BYTES: usize = COMPRESS_BLOCK_BYTES as usize;
const OFFSET_BYTES: usize = 8;
/// The longest sealed record (header, a full data body, tag).
pub(super) const MAX_SEALED_BYTES: usize = HEADER_LEN + OFFSET_BYTES + RECORD_DATA_BYTES + TAG_LEN;
/// The most bytes one record takes on the stream.
pub(super) const MAX_RECORD_BYTES: usize = LEN_BYTES + MAX_SEALED_BYTES;

/// Shutdown reason: everything is acknowledged (the sender's last record).
pub(super) const REASON_DONE: u32 = 0;
/// Shutdown reason: the end's caller cancelled.
pub(super) const REASON_CANCELLED: u32 = 1;
/// Shutdown reason: the end stopped on an error of its own (a record that failed its checks, a
/// file error).
pub(super) const REASON_BROKEN: u32 = 2;

/// What a record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Record {
    /// Payload at `offset`; `payload` is where it lies in the opened buffer.
    Data { offset: u64, payload: Range<usize> },
    /// The receiver's confirmation, and its buffer advice.
    Ack { written: u64, want_buffer: u64 },
    /// The echo of an ACK's timestamp.
    Echo { ts_us: u32 },
    /// Liveness.
    KeepAlive,
    /// The end of the stream, and why.
    Shutdown { reason: u32 },
}

/// One direction's sealing: the key and the next record number.
pub(super) struct Sealer {
    key: PacketKey,
    next: u64,
}

impl Sealer {
    pub(super) fn new(key: PacketKey) -> Self {
        Self { key, next: 0 }
    }

    /// Appends to `out` a record of `kind` stamped `ts_us`, whose body of `body_len` bytes
    /// `fill` writes. A failing `fill` leaves `out` as it was.
    pub(super) fn seal(
        &mut self,
        out: &mut Vec<u8>,
        kind: Kind,
        ts_us: u32,
        body_len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), DataError>,
    ) -> Result<(), DataError> {
        let sealed = HEADER_LEN + body_len + TAG_LEN;
        if sealed > MAX_SEALED_BYTES {
            return Err(DataError::Stream(format!("a record of {sealed} bytes is too long")));
        }
        // A number is never used twice under one key (2^64 records will not be sent).
        let pn = self.next;
        let next = pn
            .checked_add(1)
            .ok_or_else(|| DataError::Stream("the record counter ran out".to_owned()))?;
        let at = out.len();
        out.resize(at + LEN_BYTES + sealed, 0);
        out[at..at + LEN_BYTES].copy_from_slice(&(sealed as u32).to_be_bytes());
        let record = &mut out[at + LEN_BYTES..];
        let header = Header { kind, flags: 0, pn, timestamp_us: ts_us };
        let done = header
            .emit(record)
            .map_err(|e| DataError::Stream(format!("record header: {e}")))
            .and_then(|()| fill(&mut record[HEADER_LEN..HEADER_LEN + body_len]))
            .and_then(|()| {
                self.key.seal(record, body_len).map_err(|e| DataError::Stream(e.to_string()))
            });
        match done {
            Ok(_) => {
                self.next = next;
                Ok(())
            }
            Err(e) => {
                out.truncate(at);
                Err(e)
            }
        }
    }

    /// Appends a control record (any kind but `Data`) with `body`.
    pub(super) fn control(
        &mut self,
        out: &mut Vec<u8>,
        kind: Kind,
        ts_us: u32,
        body: &[u8],
    ) -> Result<(), DataError> {
        self.seal(out, kind, ts_us, body.len(), |dst| {
            dst.copy_from_slice(body);
            Ok(())
        })
    }
}

/// One direction's opening: the key and the record number expected next.
pub(super) struct Opener {
    key: PacketKey,
    next: u64,
}

impl Opener {
    pub(super) fn new(key: PacketKey) -> Self {
        Self { key, next: 0 }
    }

    /// Opens the record at the front of `buf` in place, if all of it is there: returns the
    /// bytes it took, its timestamp, and what it says (a data payload's range is in `buf`).
    /// `None` when more bytes are needed. Any record that fails a check is an error: the
    /// stream cannot go on after it.
    pub(super) fn open(
        &mut self,
        buf: &mut [u8],
    ) -> Result<Option<(usize, u32, Record)>, DataError> {
        let Some(len) = buf.get(..LEN_BYTES) else { return Ok(None) };
        let sealed = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let n = self.next;
        if !(HEADER_LEN + TAG_LEN..=MAX_SEALED_BYTES).contains(&sealed) {
            return Err(DataError::Stream(format!(
                "record {n} claims {sealed} bytes, outside what a record holds: the stream is \
                 corrupt"
            )));
        }
        let Some(record) = buf.get_mut(LEN_BYTES..LEN_BYTES + sealed) else { return Ok(None) };
        let (header, body_len) = self.key.open(record).map_err(|e| match e {
            CryptoError::Auth => DataError::Stream(format!(
                "record {n} failed authentication: it was altered on the way, or not sealed by \
                 the peer"
            )),
            other => DataError::Stream(format!("record {n}: {other}")),
        })?;
        if header.pn != n {
            return Err(DataError::Stream(format!(
                "record {} came where record {n} was due: replayed, dropped or reordered on the \
                 way",
                header.pn
            )));
        }
        self.next += 1;
        let body_at = LEN_BYTES + HEADER_LEN;
        let body = &record[HEADER_LEN..HEADER_LEN + body_len];
        let bad = |what: &str| Err(DataError::Stream(format!("record {n}: {what}")));
        let u32_at =
            |at: usize| u32::from_be_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]);
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&body[at..at + 8]);
            u64::from_be_bytes(b)
        };
        let said = match (header.kind, body_len) {
            (Kind::Data, len) if len > OFFSET_BYTES => {
                Record::Data { offset: u64_at(0), payload: body_at + OFFSET_BYTES..body_at + len }
            }
            (Kind::Data, _) => return bad("a data record without payload"),
            (Kind::Ack, 16) => Record::Ack { written: u64_at(0), want_buffer: u64_at(8) },
            (Kind::Ack2, 4) => Record::Echo { ts_us: u32_at(0) },
            (Kind::KeepAlive, 0) => Record::KeepAlive,
            (Kind::Shutdown, 4) => Record::Shutdown { reason: u32_at(0) },
            (kind, len) => return bad(&format!("a {kind:?} record of {len} body bytes")),
        };
        Ok(Some((LEN_BYTES + sealed, header.timestamp_us, said)))
    }
}

/// What a peer's shutdown reason means, for the error of a stream it ended early.
pub(super) fn shutdown_error(reason: u32) -> DataError {
    DataError::Stream(match reason {
        REASON_DONE => "the peer ended the stream before the range was complete".to_owned(),
        REASON_CANCELLED => "the peer cancelled the transfer".to_owned(),
        REASON_BROKEN => "the peer stopped on an error (see its side)".to_owned(),
        other => format!("the peer closed the stream (reason {other})"),
    })
}

#[cfg(test)]
mod tests {
    use sluice_proto::crypto::Algorithm;

    use super::*;

    fn key(seed: u8) -> PacketKey {
        PacketKey::new(Algorithm::Aes256Gcm, &[seed; 32], [seed ^ 0x5a; 12])
    }

    fn data(sealer: &mut Sealer, out: &mut Vec<u8>, offset: u64, payload: &[u8]) {
        sealer
            .seal(out, Kind::Data, 7, OFFSET_BYTES + payload.len(), |dst| {
                dst[..OFFSET_BYTES].copy_from_slice(&offset.to_be_bytes());
                dst[OFFSET_BYTES..].copy_from_slice(payload);
                Ok(())
            })
            .unwrap();
    }

    /// Opens every record of `stream`; the first error ends it.
    fn open_all(stream: &mut [u8]) -> Result<Vec<(u32, Record, Vec<u8>)>, DataError> {
        let mut opener = Opener::new(key(1));
        let mut at = 0;
        let mut out = Vec::new();
        while let Some((used, ts, record)) = opener.open(&mut stream[at..])? {
            let payload = match &record {
                Record::Data { payload, .. } => {
                    stream[at + payload.start..at + payload.end].to_vec()
                }
                _ => Vec::new(),
            };
            out.push((ts, record, payload));
            at += used;
        }
        if at != stream.len() {
            return Err(DataError::Stream("cut short".to_owned()));
        }
        Ok(out)
    }

    fn sample() -> (Vec<u8>, Vec<usize>) {
        let mut sealer = Sealer::new(key(1));
        let mut out = Vec::new();
        let mut starts = Vec::new();
        starts.push(out.len());
        data(&mut sealer, &mut out, 4096, b"hello, stream");
        starts.push(out.len());
        sealer
            .control(&mut out, Kind::Ack, 9, &[0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 1, 0])
            .unwrap();
        starts.push(out.len());
        sealer.control(&mut out, Kind::Shutdown, 11, &REASON_DONE.to_be_bytes()).unwrap();
        starts.push(out.len());
        (out, starts)
    }

    #[test]
    fn records_round_trip_in_order() {
        let (mut stream, _) = sample();
        let records = open_all(&mut stream).unwrap();
        assert_eq!(records.len(), 3);
        assert!(matches!(records[0].1, Record::Data { offset: 4096, .. }));
        assert_eq!(records[0].2, b"hello, stream");
        assert_eq!(records[1].1, Record::Ack { written: 5, want_buffer: 256 });
        assert_eq!(records[2], (11, Record::Shutdown { reason: REASON_DONE }, Vec::new()));
    }

    #[test]
    fn a_flipped_bit_anywhere_fails_authentication_or_the_length_check() {
        let (clean, _) = sample();
        for at in 0..clean.len() {
            for bit in [0x01u8, 0x80] {
                let mut stream = clean.clone();
                stream[at] ^= bit;
                let err = open_all(&mut stream).expect_err("an altered stream must fail");
                assert!(matches!(err, DataError::Stream(_)), "byte {at}: {err:?}");
            }
        }
    }

    #[test]
    fn replayed_dropped_and_cut_records_fail() {
        let (clean, starts) = sample();
        let first = clean[starts[0]..starts[1]].to_vec();
        // Replayed: the first record twice.
        let mut replayed = first.clone();
        replayed.extend_from_slice(&clean[starts[0]..]);
        let err = open_all(&mut replayed).unwrap_err().to_string();
        assert!(err.contains("record 0 came where record 1 was due"), "{err}");
        // Dropped: the second record missing.
        let mut dropped = first;
        dropped.extend_from_slice(&clean[starts[2]..]);
        let err = open_all(&mut dropped).unwrap_err().to_string();
        assert!(err.contains("record 2 came where record 1 was due"), "{err}");
        // Cut short: every prefix that ends inside a record waits for more, never opens.
        for cut in 0..clean.len() {
            let mut stream = clean[..cut].to_vec();
            let complete = starts.contains(&cut);
            assert_eq!(open_all(&mut stream).is_ok(), complete, "cut at {cut}");
        }
    }

    #[test]
    fn another_key_fails_and_a_huge_length_is_refused() {
        let mut sealer = Sealer::new(key(2));
        let mut stream = Vec::new();
        sealer.control(&mut stream, Kind::KeepAlive, 0, &[]).unwrap();
        let err = open_all(&mut stream).unwrap_err().to_string();
        assert!(err.contains("failed authentication"), "{err}");
        let mut huge = u32::MAX.to_be_bytes().to_vec();
        huge.extend_from_slice(&[0u8; 64]);
        let err = open_all(&mut huge).unwrap_err().to_string();
        assert!(err.contains("outside what a record holds"), "{err}");
    }

    #[test]
    fn a_fill_error_leaves_the_output_as_it_was() {
        let mut sealer = Sealer::new(key(1));
        let mut out = vec![1, 2, 3];
        let err = sealer.seal(&mut out, Kind::Data, 0, 100, |_| Err(DataError::Cancelled));
        assert!(err.is_err());
        assert_eq!(out, [1, 2, 3]);
        let too_long = sealer.seal(&mut out, Kind::Data, 0, MAX_SEALED_BYTES, |_| Ok(()));
        assert!(too_long.is_err());
    }
}
