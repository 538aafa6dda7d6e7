//! The plaintext data body: a zero-copy view and the validated [`DataPrefix`].

use super::{
    DATA_PREFIX_LEN, WireError, field, read_seq, read_u32, read_u64, seq_bits, write_u32, write_u64,
};
use crate::seq::Seq31;

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
    ///
    /// Errors: `Truncated` below `DATA_PREFIX_LEN` bytes, `Malformed` for a sequence number with
    /// the top bit set or an empty payload.
    pub fn parse(body: &[u8]) -> Result<(DataPrefix, &[u8]), WireError> {
        if body.len() < DATA_PREFIX_LEN {
            return Err(WireError::Truncated);
        }
        let dsn = read_seq(body, field::DSN.start, "data sequence number has the top bit set")?;
        let offset = read_u64(body, field::OFFSET.start);
        let payload = &body[field::PAYLOAD];
        if payload.is_empty() {
            return Err(WireError::Malformed("empty data payload"));
        }
        Ok((DataPrefix { dsn, offset }, payload))
    }

    /// Writes the prefix into the first `DATA_PREFIX_LEN` bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let mut view = DataBody::new_checked(buf).map_err(|_| WireError::BufferTooSmall)?;
        view.set_dsn(self.dsn);
        view.set_offset(self.offset);
        Ok(())
    }
}

/// A zero-copy view of a plaintext data body: prefix fields in place, then the payload.
///
/// [`DataBody::new_checked`] guarantees the prefix is there, so no accessor panics; it does not
/// validate the fields (use [`DataPrefix::parse`]). With [`DataBody::new_unchecked`] the
/// accessors panic on a buffer shorter than `DATA_PREFIX_LEN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataBody<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DataBody<T> {
    /// Wraps `buffer` without checking its length.
    pub const fn new_unchecked(buffer: T) -> DataBody<T> {
        DataBody { buffer }
    }

    /// Wraps `buffer`, or `Truncated` if it cannot hold the prefix.
    pub fn new_checked(buffer: T) -> Result<DataBody<T>, WireError> {
        if buffer.as_ref().len() < DATA_PREFIX_LEN {
            return Err(WireError::Truncated);
        }
        Ok(DataBody { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The raw 32-bit sequence field (top bit zero in a valid packet).
    pub fn dsn_raw(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::DSN.start)
    }

    /// The payload's byte offset.
    pub fn offset(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::OFFSET.start)
    }

    /// The payload (non-empty in a valid packet).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DataBody<T> {
    /// Writes the sequence number.
    pub fn set_dsn(&mut self, dsn: Seq31) {
        write_u32(self.buffer.as_mut(), field::DSN.start, seq_bits(dsn));
    }

    /// Writes the payload's byte offset.
    pub fn set_offset(&mut self, offset: u64) {
        write_u64(self.buffer.as_mut(), field::OFFSET.start, offset);
    }

    /// The payload, writable (a sender reads file data straight into it).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for DataBody<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}
