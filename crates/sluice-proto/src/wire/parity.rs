//! The plaintext parity body: the validated [`ParityPrefix`] and its bytes.

use super::{WireError, field, read_seq, read_u16, read_u32, seq_bits, write_u16, write_u32};
use crate::fec::{FAMILIES, Line, SIDE};
use crate::seq::Seq31;

/// The part of a parity body before its bytes: which packets the block's parities code and
/// which half of which parity this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParityPrefix {
    /// The first data sequence number the block's parities code.
    pub from: Seq31,
    /// Packets coded from `from` on (all in one block of [`SIDE`]² packets).
    pub count: u32,
    /// Which parity: its family and index.
    pub line: Line,
    /// Which half of it: 0 or 1.
    pub half: u8,
}

impl ParityPrefix {
    /// Parses a plaintext parity body into its prefix and bytes.
    ///
    /// Errors: `Truncated` below the prefix; `Malformed` for a sequence number with the top bit
    /// set, a count of zero or above a block, a side other than [`SIDE`], a family, index or
    /// half out of range, reserved bytes not zero, or no bytes.
    pub fn parse(body: &[u8]) -> Result<(ParityPrefix, &[u8]), WireError> {
        if body.len() < field::PARITY_BYTES.start {
            return Err(WireError::Truncated);
        }
        let from = read_seq(body, field::PARITY_FROM.start, "parity from has the top bit set")?;
        let side = read_u16(body, field::PARITY_SIDE.start);
        if u64::from(side) != SIDE {
            return Err(WireError::Malformed("parity block side is not the code's"));
        }
        if body[field::PARITY_RESERVED].iter().any(|&b| b != 0) {
            return Err(WireError::Malformed("parity reserved bytes are not zero"));
        }
        let index = read_u16(body, field::PARITY_INDEX.start);
        let prefix = ParityPrefix {
            from,
            count: read_u32(body, field::PARITY_COUNT.start),
            line: (body[field::PARITY_FAMILY], index),
            half: body[field::PARITY_HALF],
        };
        let bytes = &body[field::PARITY_BYTES];
        prefix.check(bytes.len())?;
        Ok((prefix, bytes))
    }

    /// Writes the prefix into the first 16 bytes of `buf`; `len` is the length of the bytes
    /// that follow it.
    pub fn emit(&self, buf: &mut [u8], len: usize) -> Result<(), WireError> {
        self.check(len)?;
        if buf.len() < field::PARITY_BYTES.start {
            return Err(WireError::BufferTooSmall);
        }
        write_u32(buf, field::PARITY_FROM.start, seq_bits(self.from));
        write_u32(buf, field::PARITY_COUNT.start, self.count);
        write_u16(buf, field::PARITY_SIDE.start, SIDE as u16);
        buf[field::PARITY_FAMILY] = self.line.0;
        buf[field::PARITY_HALF] = self.half;
        write_u16(buf, field::PARITY_INDEX.start, self.line.1);
        buf[field::PARITY_RESERVED].fill(0);
        Ok(())
    }

    fn check(&self, len: usize) -> Result<(), WireError> {
        if self.count == 0 || u64::from(self.count) > SIDE * SIDE {
            return Err(WireError::Malformed("parity count out of range"));
        }
        let (family, index) = self.line;
        if family >= FAMILIES || u64::from(index) >= SIDE || self.half > 1 {
            return Err(WireError::Malformed("parity family, index or half out of range"));
        }
        if len == 0 {
            return Err(WireError::Malformed("parity without bytes"));
        }
        Ok(())
    }
}
