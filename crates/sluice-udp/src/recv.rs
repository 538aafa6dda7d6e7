//! Batch receives: one `recvmmsg` (through quinn-udp) into reusable buffers, each message split
//! into datagrams by its GRO stride.

use std::io::{self, IoSliceMut};
use std::net::SocketAddr;

use quinn_udp::RecvMeta;

use crate::socket::Socket;
use crate::{RECV_BATCH, is_transient};

/// Bytes of one message buffer: a GRO message (up to 64 segments, at most 64 KiB in all) or
/// the largest datagram fits.
const MESSAGE_BYTES: usize = 65_536;

/// How many transient errors (ICMP reports of earlier sends) one `recv_batch` call skips before
/// it reports that nothing is waiting.
const TRANSIENT_RETRIES: usize = RECV_BATCH;

/// Reusable receive buffers for [`Socket::recv_batch`]; no allocation per datagram.
pub struct RecvBatch {
    bufs: Box<[[u8; MESSAGE_BYTES]; RECV_BATCH]>,
    meta: [RecvMeta; RECV_BATCH],
    /// Messages the last `recv_batch` filled (each one or several datagrams).
    messages: usize,
}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("messages", &self.messages)
            .field("meta", &&self.meta[..self.messages])
            .finish_non_exhaustive()
    }
}

impl Default for RecvBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl RecvBatch {
    /// Buffers for [`RECV_BATCH`] messages of up to 64 KiB each (a GRO batch fits one).
    pub fn new() -> Self {
        let bufs: Box<[[u8; MESSAGE_BYTES]]> =
            vec![[0u8; MESSAGE_BYTES]; RECV_BATCH].into_boxed_slice();
        let bufs = match bufs.try_into() {
            Ok(bufs) => bufs,
            Err(_) => unreachable!("vec! made exactly RECV_BATCH buffers"),
        };
        Self { bufs, meta: [RecvMeta::default(); RECV_BATCH], messages: 0 }
    }

    /// Calls `each` with every datagram of the last [`Socket::recv_batch`] (mutable: the
    /// caller decrypts in place), in arrival order.
    pub fn datagrams(&mut self, mut each: impl FnMut(&mut [u8])) {
        self.datagrams_from(|_, datagram| each(datagram));
    }

    /// Like [`RecvBatch::datagrams`], with each datagram's source address.
    pub fn datagrams_from(&mut self, mut each: impl FnMut(SocketAddr, &mut [u8])) {
        for (meta, buf) in self.meta[..self.messages].iter().zip(self.bufs.iter_mut()) {
            let len = meta.len.min(MESSAGE_BYTES);
            for datagram in buf[..len].chunks_mut(meta.stride.max(1)) {
                each(meta.addr, datagram);
            }
        }
    }

    /// Kernel messages the last [`Socket::recv_batch`] filled: fewer than its datagrams when
    /// GRO joined several into one.
    pub fn messages(&self) -> usize {
        self.messages
    }

    /// Datagrams in the messages received, as [`RecvBatch::datagrams`] yields them.
    fn count(&self) -> usize {
        self.meta[..self.messages]
            .iter()
            .map(|meta| meta.len.min(MESSAGE_BYTES).div_ceil(meta.stride.max(1)))
            .sum()
    }
}

impl Socket {
    /// Receives what is waiting, up to [`RECV_BATCH`] messages, into `batch`; returns the number
    /// of datagrams (0 when none is waiting). Datagrams from other addresses than the peer are
    /// kept too: the protocol's authentication decides.
    ///
    /// One `recvmmsg` call; with GRO a message may hold up to 64 datagrams of one size (the
    /// last may be shorter), which [`RecvBatch::datagrams`] hands out one by one. Empty
    /// datagrams are not counted or handed out.
    pub fn recv_batch(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        batch.messages = 0;
        let mut slices: [IoSliceMut<'_>; RECV_BATCH] =
            batch.bufs.each_mut().map(|buf| IoSliceMut::new(buf));
        for _ in 0..TRANSIENT_RETRIES {
            // quinn-udp retries EINTR itself.
            match self.state.recv((&self.socket).into(), &mut slices, &mut batch.meta) {
                Ok(messages) => {
                    batch.messages = messages.min(RECV_BATCH);
                    return Ok(batch.count());
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
                Err(e) if e.kind() == io::ErrorKind::Interrupted || is_transient(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(0)
    }
}
