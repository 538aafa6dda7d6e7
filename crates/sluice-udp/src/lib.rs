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
//! - [`path_mtu`] asks the kernel for the path MTU toward the peer; [`set_dont_fragment`] makes
//!   a datagram larger than the path fail with `EMSGSIZE` instead of being fragmented.
//!
//! Every socket is non-blocking; [`Socket::wait`] sleeps until it is readable (or writable).
//!
//! One TCP fact lives here too, because reading it takes `unsafe`: [`tcp_rtt`], the kernel's
//! round-trip figures of a TCP connection, for the buffer sizing of Sluice's TCP data streams.
//!
//! The modules own one thing each: `buffers` (socket buffer sizing), `socket` (creation,
//! feature detection, waiting), `send` (GSO and `sendmmsg`), `recv` (`recvmmsg` + GRO) and
//! `mtu` (path MTU, don't-fragment). GSO sends, and the detection of GSO and GRO (which turns
//! `UDP_GRO` on), go through `quinn-udp`; `sendmmsg` and most socket options through `rustix`.
//! The receive is this crate's own `recvmmsg` through `libc`, because it reads each message's
//! kernel timestamp, which `quinn-udp` does not. `recv` and `tcp` (`getsockopt(TCP_INFO)`,
//! which neither `rustix` nor the standard library reads) hold the crate's only `unsafe` code,
//! each block with a `SAFETY` comment.

use std::io;

mod buffers;
mod mtu;
mod recv;
mod send;
mod socket;
mod tcp;

pub use buffers::BufferReport;
pub use mtu::{max_payload, path_mtu, set_dont_fragment};
pub use recv::RecvBatch;
pub use socket::Socket;
pub use tcp::{TcpRtt, tcp_rtt};

/// Readies a bound socket to receive before its data channel starts: buffers of
/// `buffer_bytes` each way (as [`Socket::new`] sizes them) and a receive time on every datagram.
/// An early start's sockets are bound and named to the peer before their channel runs, and its
/// first datagrams wait in the socket meanwhile: without this they would carry no receive time
/// (the kernel stamps only what arrives after `SO_TIMESTAMPNS` is on), and the channel's
/// estimators would time them by when they were read.
pub fn prepare_receive(
    socket: &std::net::UdpSocket,
    buffer_bytes: usize,
) -> io::Result<BufferReport> {
    let report = buffers::size_buffers(socket, buffer_bytes)?;
    recv::enable_receive_info(socket)?;
    Ok(report)
}

/// Datagrams one [`RecvBatch`] holds at most per [`Socket::recv_batch`] call.
pub const RECV_BATCH: usize = 32;
/// Segments one [`Socket::send_batch`] call carries at most (the kernel's GSO limit is 64).
pub const MAX_BATCH_SEGMENTS: usize = 64;
/// Largest UDP payload one GSO super-datagram carries in total: an IPv4 packet's 65,535 bytes
/// less the IPv4 and UDP headers (IPv6 allows a little more; this bound serves both).
pub const GSO_MAX_BYTES: usize = 65_535 - 20 - 8;

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

/// Whether `e` is `EMSGSIZE`: a datagram larger than the path (with don't-fragment set) or than
/// UDP allows.
pub fn is_too_big(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::MSGSIZE.raw_os_error())
}
