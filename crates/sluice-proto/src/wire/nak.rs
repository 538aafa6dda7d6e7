//! The NAK body: UDT's compressed loss list (the paper's appendix).
//!
//! An entry with the top bit clear is one lost number; an entry with it set starts a range that
//! the next entry (top bit clear) ends, inclusive. The body is validated once, when parsed, so
//! iterating it cannot fail.

use core::iter::FusedIterator;

use super::{
    HALF_CIRCLE, SEQ_FLAG, WireError, field::NAK_ENTRY_LEN, forward_distance, read_u32, seq_bits,
};
use crate::seq::Seq31;

/// Validated NAK body: an iterator of inclusive lost ranges.
#[derive(Debug, Clone)]
pub struct NakRanges<'a> {
    /// The whole validated body.
    body: &'a [u8],
    /// Byte offset of the next entry to yield.
    pos: usize,
}

impl<'a> NakRanges<'a> {
    /// Validates a plaintext NAK body (what `Control::parse(Kind::Nak, body)` does).
    ///
    /// Errors: `Truncated` if `body` holds no whole entry; `Malformed` for a length that is not a
    /// multiple of 4, a range start that is last or followed by another range start, or a range
    /// whose end is not 1 to 2^30 − 1 after its start on the 31-bit circle.
    pub fn parse(body: &'a [u8]) -> Result<NakRanges<'a>, WireError> {
        if body.len() < NAK_ENTRY_LEN {
            return Err(WireError::Truncated);
        }
        if !body.len().is_multiple_of(NAK_ENTRY_LEN) {
            return Err(WireError::Malformed("nak length is not a multiple of 4"));
        }
        let mut at = 0;
        while at < body.len() {
            let start = read_u32(body, at);
            at += NAK_ENTRY_LEN;
            if start & SEQ_FLAG == 0 {
                continue;
            }
            if at == body.len() {
                return Err(WireError::Malformed("nak range start without an end"));
            }
            let end = read_u32(body, at);
            at += NAK_ENTRY_LEN;
            if end & SEQ_FLAG != 0 {
                return Err(WireError::Malformed("two nak range starts in a row"));
            }
            let span = forward_distance(Seq31::new(start), Seq31::new(end));
            if span == 0 {
                return Err(WireError::Malformed("nak range of one number"));
            }
            if span >= HALF_CIRCLE {
                return Err(WireError::Malformed("nak range end is not after its start"));
            }
        }
        Ok(NakRanges { body, pos: 0 })
    }

    /// The whole validated body, as received (independent of how far iteration has gone).
    pub fn as_bytes(&self) -> &'a [u8] {
        self.body
    }

    fn entry(&self, at: usize) -> Option<u32> {
        let bytes = self.body.get(at..at.checked_add(NAK_ENTRY_LEN)?)?;
        Some(read_u32(bytes, 0))
    }
}

impl Iterator for NakRanges<'_> {
    type Item = (Seq31, Seq31);

    fn next(&mut self) -> Option<Self::Item> {
        let first = self.entry(self.pos)?;
        if first & SEQ_FLAG == 0 {
            self.pos += NAK_ENTRY_LEN;
            let single = Seq31::new(first);
            return Some((single, single));
        }
        // Validation guarantees the end entry; `?` keeps a bug from turning into a panic.
        let last = self.entry(self.pos + NAK_ENTRY_LEN)?;
        self.pos += 2 * NAK_ENTRY_LEN;
        Some((Seq31::new(first), Seq31::new(last)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let rest = self.body.len().saturating_sub(self.pos);
        (rest.div_ceil(2 * NAK_ENTRY_LEN), Some(rest / NAK_ENTRY_LEN))
    }
}

impl FusedIterator for NakRanges<'_> {}

/// Writes as many of `ranges` as fit in `buf` in UDT's compressed form; returns
/// `(bytes written, ranges written)`.
///
/// `lo == hi` becomes a single entry (4 bytes), any other range a flagged pair (8 bytes). Writing
/// stops at the first range that does not fit whole, so the ranges written are a prefix of
/// `ranges` and the caller resends the rest later. Each range must have `hi` equal to `lo` or
/// less than 2^30 after it; a range that is not stops the writing too (and trips a debug
/// assertion: it is a bug in the caller's loss list).
pub fn emit_nak(ranges: impl Iterator<Item = (Seq31, Seq31)>, buf: &mut [u8]) -> (usize, usize) {
    let mut written = 0;
    let mut count = 0;
    for (lo, hi) in ranges {
        let span = forward_distance(lo, hi);
        debug_assert!(span < HALF_CIRCLE, "nak range {lo:?}..={hi:?} runs backwards");
        if span >= HALF_CIRCLE {
            break;
        }
        let need = if span == 0 { NAK_ENTRY_LEN } else { 2 * NAK_ENTRY_LEN };
        let Some(out) = buf.get_mut(written..written + need) else {
            break;
        };
        if span == 0 {
            out.copy_from_slice(&seq_bits(lo).to_be_bytes());
        } else {
            out[..NAK_ENTRY_LEN].copy_from_slice(&(seq_bits(lo) | SEQ_FLAG).to_be_bytes());
            out[NAK_ENTRY_LEN..].copy_from_slice(&seq_bits(hi).to_be_bytes());
        }
        written += need;
        count += 1;
    }
    (written, count)
}
