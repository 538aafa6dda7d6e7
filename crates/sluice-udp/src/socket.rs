//! The socket: creation (buffers, don't-fragment, GSO/GRO detection), feature getters, waiting.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};

use quinn_udp::UdpSocketState;
use rustix::net::SocketAddrAny;

use crate::buffers::{BufferReport, size_buffers};
use crate::mtu::set_dont_fragment;
use crate::{GSO_MAX_BYTES, MAX_BATCH_SEGMENTS};

/// Datagrams one `sendmmsg` call carries when GSO is off.
pub(crate) const SENDMMSG_BATCH: usize = MAX_BATCH_SEGMENTS;

/// A UDP socket toward one peer, with batch I/O.
///
/// `Send + Sync`: one thread may send while another receives through a shared reference.
pub struct Socket {
    pub(crate) socket: UdpSocket,
    pub(crate) peer: SocketAddr,
    /// `peer` in the form `sendmmsg` takes, converted once.
    pub(crate) peer_any: SocketAddrAny,
    /// quinn-udp's per-socket state: GSO sends go through it (receives are `recv`'s own).
    pub(crate) state: UdpSocketState,
    /// Segments one GSO send may carry (the kernel's limit capped at [`MAX_BATCH_SEGMENTS`]);
    /// 1 when the kernel has no GSO.
    pub(crate) gso_segments: usize,
    /// GSO in use: starts as detected, goes false for good on [`Socket::disable_gso`] or on
    /// the first send error saying the device or path cannot segment.
    pub(crate) gso_on: AtomicBool,
    gro: bool,
}

impl std::fmt::Debug for Socket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Socket")
            .field("local", &self.socket.local_addr().ok())
            .field("peer", &self.peer)
            .field("gso", &self.gso())
            .field("gso_segments", &self.gso_segments)
            .field("gro", &self.gro)
            .finish()
    }
}

impl Socket {
    /// Wraps a bound socket toward `peer`: non-blocking, buffers of `buffer_bytes` each way
    /// (forced past the sysctl cap when privileged), don't-fragment set ([`set_dont_fragment`]),
    /// GSO/GRO detected.
    pub fn new(
        socket: UdpSocket,
        peer: SocketAddr,
        buffer_bytes: usize,
    ) -> io::Result<(Self, BufferReport)> {
        socket.set_nonblocking(true)?;
        let report = size_buffers(&socket, buffer_bytes)?;
        // Probes GSO and GRO support (once per process for GSO's kernel check), turns UDP_GRO
        // on for this socket where the kernel has it, and sets packet-info options.
        let state = UdpSocketState::new((&socket).into())?;
        // After quinn-udp, which sets IP_PMTUDISC_PROBE: we want the learned path MTU honoured.
        set_dont_fragment(&socket)?;
        // Per-datagram receive times for the protocol's estimators, and the kernel's drop count.
        crate::recv::enable_receive_info(&socket)?;
        let gso_segments = state.max_gso_segments().clamp(1, MAX_BATCH_SEGMENTS);
        let gro = state.gro_segments() > 1;
        tracing::debug!(%peer, gso_segments, gro, "UDP socket ready");
        Ok((
            Self {
                peer_any: SocketAddrAny::from(peer),
                socket,
                peer,
                state,
                gso_segments,
                gso_on: AtomicBool::new(gso_segments > 1),
                gro,
            },
            report,
        ))
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The underlying socket (for its local address, or socket options this type does not set).
    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    /// Segments one `send_batch` may carry now (1 when neither GSO nor sendmmsg batches).
    ///
    /// With GSO, the kernel's segment limit (capped at [`MAX_BATCH_SEGMENTS`]); with
    /// `sendmmsg`, the batch this crate uses. One GSO super-datagram also stays under
    /// [`GSO_MAX_BYTES`], so large segments need more than one system call per batch: see
    /// [`Socket::segments_per_call`].
    pub fn max_segments(&self) -> usize {
        if self.gso() { self.gso_segments } else { SENDMMSG_BATCH }
    }

    /// Datagrams of `segment_size` bytes one system call carries now: [`Socket::max_segments`],
    /// lowered under GSO so the super-datagram stays within [`GSO_MAX_BYTES`].
    pub fn segments_per_call(&self, segment_size: usize) -> usize {
        if self.gso() {
            (GSO_MAX_BYTES / segment_size.max(1)).clamp(1, self.gso_segments)
        } else {
            SENDMMSG_BATCH
        }
    }

    /// Whether UDP GSO is in use.
    pub fn gso(&self) -> bool {
        self.gso_on.load(Ordering::Relaxed)
    }

    /// Turns GSO off for good on this socket: sends go through `sendmmsg` from now on.
    pub fn disable_gso(&self) {
        self.gso_on.store(false, Ordering::Relaxed);
    }

    /// Whether UDP GRO is in use (the kernel accepts `UDP_GRO`, and it was turned on for this
    /// socket): a received message may then hold several datagrams of one size.
    pub fn gro(&self) -> bool {
        self.gro
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
