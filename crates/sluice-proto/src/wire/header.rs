//! The 16-byte header: a zero-copy view over a datagram and the validated [`Header`].

use super::{HEADER_LEN, Kind, WireError, field, flags, read_u32, read_u64, write_u32, write_u64};

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
    ///
    /// Errors: `Truncated` if `buf` is shorter than the header, `UnknownKind` for a kind byte
    /// that names no [`Kind`], `Malformed` for non-zero reserved bytes or flags the kind does not allow.
    pub fn parse(buf: &[u8]) -> Result<Header, WireError> {
        let packet = Packet::new_checked(buf)?;
        let kind = Kind::from_u8(packet.kind_raw())?;
        if packet.reserved() != 0 {
            return Err(WireError::Malformed("reserved header bytes are not zero"));
        }
        let header = Header {
            kind,
            flags: packet.flags(),
            pn: packet.pn(),
            timestamp_us: packet.timestamp_us(),
        };
        header.check_flags()?;
        Ok(header)
    }

    /// Writes the header into the first `HEADER_LEN` bytes of `buf`.
    ///
    /// Errors: `BufferTooSmall`, or `Malformed` if the flags are ones [`Header::parse`] would
    /// reject (so a buggy sender finds out before its peer drops the packet).
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        self.check_flags()?;
        let mut packet = Packet::new_checked(buf).map_err(|_| WireError::BufferTooSmall)?;
        packet.set_kind(self.kind);
        packet.set_flags(self.flags);
        packet.clear_reserved();
        packet.set_pn(self.pn);
        packet.set_timestamp_us(self.timestamp_us);
        Ok(())
    }

    fn check_flags(&self) -> Result<(), WireError> {
        if self.kind.is_control() {
            if self.flags != 0 {
                return Err(WireError::Malformed("flags set on a control packet"));
            }
        } else if self.flags & !flags::ALL != 0 {
            return Err(WireError::Malformed("unknown flag bits"));
        }
        Ok(())
    }
}

/// A zero-copy view of a datagram: the header fields in place, then the body.
///
/// [`Packet::new_checked`] guarantees the buffer holds a whole header, so no accessor panics;
/// it does not validate the fields (use [`Header::parse`] or [`Packet::header`] for that).
/// With [`Packet::new_unchecked`] the accessors panic on a buffer shorter than the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking its length.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps `buffer`, or `Truncated` if it cannot hold a header.
    pub fn new_checked(buffer: T) -> Result<Packet<T>, WireError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(Packet { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The raw kind byte.
    pub fn kind_raw(&self) -> u8 {
        self.buffer.as_ref()[field::KIND]
    }

    /// The raw flags byte.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// The reserved bytes as one number (zero in a valid packet).
    pub fn reserved(&self) -> u16 {
        let buf = self.buffer.as_ref();
        u16::from_be_bytes([buf[field::RESERVED.start], buf[field::RESERVED.start + 1]])
    }

    /// The packet number.
    pub fn pn(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::PN.start)
    }

    /// The sender's timestamp in microseconds.
    pub fn timestamp_us(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::TIMESTAMP.start)
    }

    /// The validated header.
    pub fn header(&self) -> Result<Header, WireError> {
        Header::parse(self.buffer.as_ref())
    }

    /// Everything after the header: the sealed body and tag, or the plaintext once opened.
    pub fn body(&self) -> &[u8] {
        &self.buffer.as_ref()[field::BODY]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes the kind byte.
    pub fn set_kind(&mut self, kind: Kind) {
        self.buffer.as_mut()[field::KIND] = kind.into();
    }

    /// Writes the flags byte (not validated: see [`Header::emit`]).
    pub fn set_flags(&mut self, flags: u8) {
        self.buffer.as_mut()[field::FLAGS] = flags;
    }

    /// Zeroes the reserved bytes.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::RESERVED].fill(0);
    }

    /// Writes the packet number.
    pub fn set_pn(&mut self, pn: u64) {
        write_u64(self.buffer.as_mut(), field::PN.start, pn);
    }

    /// Writes the sender's timestamp.
    pub fn set_timestamp_us(&mut self, timestamp_us: u32) {
        write_u32(self.buffer.as_mut(), field::TIMESTAMP.start, timestamp_us);
    }

    /// Everything after the header, writable.
    pub fn body_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::BODY]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}
