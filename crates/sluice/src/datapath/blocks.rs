//! File I/O in large blocks: read-ahead for the sender, write-behind for the receiver. Each
//! holds one fixed buffer, so memory does not grow with the file.

use std::collections::VecDeque;
use std::io;

use super::store::{Store, read_exact_at, read_up_to};
use super::written::SharedFile;

/// Bytes the sender reads ahead at once for new data.
pub const READ_BLOCK_BYTES: usize = 256 << 10;
/// Bytes of contiguous payload the receiver gathers before one write.
pub const WRITE_BLOCK_BYTES: usize = 256 << 10;

/// Serves the sender's `fill(offset, dst)` calls. New data comes in increasing offsets within
/// each chunk the channel took, so it is read a block at a time; a retransmission (an offset
/// outside the block that is not the start of a chunk) reads just its bytes, because loss is
/// scattered and a block per lost packet would multiply the reads.
pub(super) struct ReadAhead<'f> {
    store: &'f dyn Store,
    buf: Box<[u8]>,
    /// File offset of `buf[0]`, and how many bytes of `buf` are valid.
    start: u64,
    valid: usize,
    /// One past the last byte the sender may ask for: reads never go past it.
    end: u64,
    /// Starts of the chunks queued for sending whose first packet has not been read yet: a
    /// read there begins a new block.
    expected: VecDeque<u64>,
}

impl<'f> ReadAhead<'f> {
    pub(super) fn new(store: &'f dyn Store, start: u64, end: u64) -> Self {
        let buf = vec![0; READ_BLOCK_BYTES].into_boxed_slice();
        Self { store, buf, start, valid: 0, end, expected: VecDeque::new() }
    }

    /// Says that new data will next be read from `offset` (the start of a chunk queued after
    /// the ones before).
    pub(super) fn expect(&mut self, offset: u64) {
        self.expected.push_back(offset);
    }

    /// Writes the store's bytes at `offset` into `dst` (exactly `dst.len()` bytes).
    pub(super) fn fill(&mut self, offset: u64, dst: &mut [u8]) -> io::Result<()> {
        let len = dst.len() as u64;
        let fresh = self.expected.front() == Some(&offset);
        if fresh {
            self.expected.pop_front();
        }
        let cached_end = self.start + self.valid as u64;
        let cached = offset >= self.start && offset + len <= cached_end;
        let continues = offset >= self.start && offset <= cached_end;
        if len > self.buf.len() as u64 || !(cached || continues || fresh) {
            return read_exact_at(self.store, dst, offset);
        }
        if !cached {
            // The next new data: read the block that starts with it.
            let want = (self.end.saturating_sub(offset).min(self.buf.len() as u64)).max(len);
            self.valid = 0;
            let got = read_up_to(self.store, &mut self.buf[..want as usize], offset)?;
            self.start = offset;
            self.valid = got;
            if (got as u64) < len {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        let at = (offset - self.start) as usize;
        dst.copy_from_slice(&self.buf[at..at + dst.len()]);
        Ok(())
    }
}

/// Gathers the receiver's payloads into large writes: a payload that continues the current run
/// is appended; anything else (a repair, a gap) writes the run out and starts a new one.
pub(super) struct WriteBehind<'f> {
    file: &'f SharedFile<'f>,
    buf: Vec<u8>,
    /// File offset of `buf[0]`.
    start: u64,
}

impl<'f> WriteBehind<'f> {
    pub(super) fn new(file: &'f SharedFile<'f>) -> Self {
        Self { file, buf: Vec::with_capacity(WRITE_BLOCK_BYTES), start: 0 }
    }

    /// Writes `data` at `offset`, now or at a later flush.
    pub(super) fn write(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let continues = offset == self.start + self.buf.len() as u64;
        if !self.buf.is_empty() && (!continues || self.buf.len() + data.len() > WRITE_BLOCK_BYTES) {
            self.flush()?;
        }
        if data.len() > WRITE_BLOCK_BYTES {
            return self.file.write_all_at(data, offset);
        }
        if self.buf.is_empty() {
            self.start = offset;
        }
        self.buf.extend_from_slice(data);
        Ok(())
    }

    /// Writes out what is gathered.
    pub(super) fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            self.file.write_all_at(&self.buf, self.start)?;
            self.buf.clear();
        }
        Ok(())
    }
}
