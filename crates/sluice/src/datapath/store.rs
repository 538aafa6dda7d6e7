//! Where a transfer's bytes live. A transfer moves a range of one offset space: the offsets of
//! one file, or of many files laid end to end (a tree, [`crate::tree::FileSet`]). The channels
//! read and write through [`Store`] and never know which.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Positional reads and writes in a transfer's offset space. Calls come from every channel's
/// thread at once.
pub trait Store: Sync {
    /// Reads into `buf` at `offset`; returns the bytes read, fewer than `buf.len()` only at
    /// the end of a file (0 past the end).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes `buf` at `offset`; returns the bytes written, fewer than `buf.len()` only at the
    /// end of a file of a tree (never 0 for a non-empty `buf`).
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize>;
}

impl Store for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        FileExt::read_at(self, buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        FileExt::write_at(self, buf, offset)
    }
}

/// Reads into `buf` at `offset` until it is full or the store ends; returns the bytes read.
pub fn read_up_to(store: &dyn Store, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match store.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Reads exactly `buf.len()` bytes at `offset`; a store that ends first is `UnexpectedEof`.
pub fn read_exact_at(store: &dyn Store, buf: &mut [u8], offset: u64) -> io::Result<()> {
    if read_up_to(store, buf, offset)? < buf.len() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("the data ends before offset {}", offset + buf.len() as u64),
        ));
    }
    Ok(())
}

/// Writes all of `buf` at `offset`.
pub fn write_all_at(store: &dyn Store, buf: &[u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match store.write_at(&buf[done..], offset + done as u64) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl<S: Store + Send + ?Sized> Store for std::sync::Arc<S> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        (**self).read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        (**self).write_at(buf, offset)
    }
}

/// A fault to inject into one end's data path, standing in for a disk or memory fault in
/// tests of repair: the byte at `offset` of the transfer's offset space is inverted in every
/// read to send it (on a sending end) or every write of it (on a receiving end) during the
/// first `times` passes over the data ([`Fault::in_pass`]): a transfer's data phases, its first
/// pass and then its repair rounds, or a relay's collections. The ends' own hashing reads the
/// files directly and never sees it.
///
/// A pass, not a read: a retransmission reads the byte again, and a fault spent on the first
/// read went away whenever the packet that carried it was lost (a repair test then saw no
/// repair; seen once here, under load on loopback).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// Offset of the byte in the transfer's offset space.
    pub offset: u64,
    /// How many passes over the data get that byte wrong.
    pub times: u32,
}

impl Fault {
    /// The byte to get wrong in pass `pass` (0 the first), if the fault is not spent by then.
    pub fn in_pass(self, pass: u32) -> Option<u64> {
        (pass < self.times).then_some(self.offset)
    }
}

/// A [`Store`] whose reads (a sending end's) or writes (a receiving end's) of one byte go
/// wrong, every time ([`Fault`]).
#[derive(Debug)]
pub struct Faulty<S> {
    inner: S,
    offset: u64,
    /// Whether writes go wrong (else reads).
    on_write: bool,
}

impl<S: Store> Faulty<S> {
    /// `inner` with the byte at `offset` wrong in its reads (a sending end: a memory fault
    /// between the disk and the socket).
    pub fn reading(inner: S, offset: u64) -> Self {
        Self { inner, offset, on_write: false }
    }

    /// `inner` with the byte at `offset` wrong in its writes (a receiving end: what reaches the
    /// disk is wrong; reading it back is not corrupted again).
    pub fn writing(inner: S, offset: u64) -> Self {
        Self { inner, offset, on_write: true }
    }

    /// Where in `len` bytes at `offset` the faulty byte is, if there.
    fn strikes(&self, offset: u64, len: usize) -> Option<usize> {
        let at = self.offset.checked_sub(offset).filter(|&at| at < len as u64)?;
        Some(at as usize)
    }
}

impl<S: Store> Store for Faulty<S> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let n = self.inner.read_at(buf, offset)?;
        if self.on_write {
            return Ok(n);
        }
        if let Some(at) = self.strikes(offset, n) {
            buf[at] = !buf[at];
        }
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        let Some(at) = self.strikes(offset, buf.len()).filter(|_| self.on_write) else {
            return self.inner.write_at(buf, offset);
        };
        let mut bad = buf.to_vec();
        bad[at] = !bad[at];
        write_all_at(&self.inner, &bad, offset)?;
        Ok(buf.len())
    }
}
