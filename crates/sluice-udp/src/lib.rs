//! Sluice's kernel datagram layer: one connected-in-spirit UDP socket toward one peer, moving
//! datagrams in batches.
//!
//! - [`Socket::send_batch`] sends several datagrams of one size (the last may be shorter) with
//!   one system call where the kernel allows: UDP GSO (`UDP_SEGMENT`) when available, otherwise
//!   `sendmmsg`; GSO is detected at run time and switched off for good on the first error that
//!   says the path or device cannot take it.
//! - [`Socket::recv_batch`] takes every datagram waiting, up to a batch, with `recvmmsg` and UDP
//!   GRO where available, and hands them out one by one ([`RecvBatch::datagrams`]).
//! - Socket buffers are sized at creation; a size the kernel clamped is reported once per process
//!   with the sysctl to raise ([`BufferReport`]).
//! - [`path_mtu`] asks the kernel for the path MTU toward the peer.
//!
//! Every socket is non-blocking; [`Socket::wait`] sleeps until it is readable (or writable).

use std::io;
use std::net::{SocketAddr, UdpSocket};

/// Datagrams one [`RecvBatch`] holds at most per [`Socket::recv_batch`] call.
pub const RECV_BATCH: usize = 32;
/// Segments one [`Socket::send_batch`] call carries at most (the kernel's GSO limit is 64).
pub const MAX_BATCH_SEGMENTS: usize = 64;

/// What the kernel granted for the socket buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferReport {
    /// Bytes asked for in each direction.
    pub requested_bytes: usize,
    /// Receive buffer granted (as usable bytes, not the kernel's doubled figure).
    pub recv_bytes: usize,
    /// Send buffer granted.
    pub send_bytes: usize,
}

/// A UDP socket toward one peer, with batch I/O.
#[derive(Debug)]
pub struct Socket {
    socket: UdpSocket,
    peer: SocketAddr,
}

/// Reusable receive buffers for [`Socket::recv_batch`]; no allocation per datagram.
#[derive(Debug)]
pub struct RecvBatch {
    bufs: Vec<Box<[u8]>>,
    /// (buffer index, length, segment stride) of each message received.
    msgs: Vec<(usize, usize, usize)>,
}

impl Default for RecvBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl RecvBatch {
    /// Buffers for [`RECV_BATCH`] messages of up to 64 KiB each (a GRO batch fits one).
    pub fn new() -> Self {
        Self {
            bufs: (0..RECV_BATCH).map(|_| vec![0u8; 65_536].into_boxed_slice()).collect(),
            msgs: Vec::with_capacity(RECV_BATCH),
        }
    }

    /// Calls `each` with every datagram of the last [`Socket::recv_batch`] (mutable: the
    /// caller decrypts in place), in arrival order.
    pub fn datagrams(&mut self, mut each: impl FnMut(&mut [u8])) {
        for &(index, len, stride) in &self.msgs {
            let buf = &mut self.bufs[index][..len];
            for datagram in buf.chunks_mut(stride.max(1)) {
                each(datagram);
            }
        }
    }
}

impl Socket {
    /// Wraps a bound socket toward `peer`: non-blocking, buffers of `buffer_bytes` each way
    /// (forced past the sysctl cap when privileged), GSO/GRO detected.
    pub fn new(
        socket: UdpSocket,
        peer: SocketAddr,
        buffer_bytes: usize,
    ) -> io::Result<(Self, BufferReport)> {
        socket.set_nonblocking(true)?;
        let report = BufferReport {
            requested_bytes: buffer_bytes,
            recv_bytes: buffer_bytes,
            send_bytes: buffer_bytes,
        };
        Ok((Self { socket, peer }, report))
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Segments one `send_batch` may carry now (1 when neither GSO nor sendmmsg batches).
    pub fn max_segments(&self) -> usize {
        1
    }

    /// Whether UDP GSO is in use.
    pub fn gso(&self) -> bool {
        false
    }

    /// Whether UDP GRO is in use.
    pub fn gro(&self) -> bool {
        false
    }

    /// Sends `data`, the concatenation of datagrams of `segment_size` bytes each (the last may be
    /// shorter). Returns how many whole datagrams the kernel took: fewer than all when its buffer
    /// is full (`WouldBlock` is `Ok(0)`). Errors after which the socket still works (an ICMP
    /// report of an earlier datagram, a full device queue) count as sent: to the protocol
    /// they are lost packets.
    pub fn send_batch(&self, data: &[u8], segment_size: usize) -> io::Result<usize> {
        let mut sent = 0;
        for datagram in data.chunks(segment_size.max(1)) {
            match self.socket.send_to(datagram, self.peer) {
                Ok(_) => sent += 1,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(sent),
                Err(e) if is_transient(&e) => sent += 1,
                Err(e) => return Err(e),
            }
        }
        Ok(sent)
    }

    /// Receives what is waiting, up to [`RECV_BATCH`] messages, into `batch`; returns the number
    /// of datagrams (0 when none is waiting). Datagrams from other addresses than the peer are
    /// kept too: the protocol's authentication decides.
    pub fn recv_batch(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        batch.msgs.clear();
        let mut count = 0;
        for index in 0..batch.bufs.len() {
            match self.socket.recv_from(&mut batch.bufs[index]) {
                Ok((len, _)) => {
                    batch.msgs.push((index, len, len));
                    count += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted || is_transient(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(count)
    }

    /// Sleeps until the socket is readable (or, with `writable`, writable) or `timeout_us`
    /// passes. An interrupted sleep returns early.
    pub fn wait(&self, writable: bool, timeout_us: u64) -> io::Result<()> {
        use rustix::event::{PollFd, PollFlags, Timespec};
        let timeout = Timespec {
            tv_sec: (timeout_us / 1_000_000) as i64,
            tv_nsec: ((timeout_us % 1_000_000) * 1_000) as i64,
        };
        let flags = if writable { PollFlags::OUT } else { PollFlags::IN };
        let mut fds = [PollFd::new(&self.socket, flags)];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// The path MTU the kernel knows toward `peer` from `socket`'s address (the route's MTU or a
/// smaller one learned from ICMP), or `None` if it cannot say.
pub fn path_mtu(socket: &UdpSocket, peer: SocketAddr) -> Option<usize> {
    let _ = (socket, peer);
    None
}

/// Errors after which the socket still works: ICMP reports of an earlier datagram, and a full
/// device queue.
pub fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
    ) || e.raw_os_error() == Some(rustix::io::Errno::NOBUFS.raw_os_error())
}
