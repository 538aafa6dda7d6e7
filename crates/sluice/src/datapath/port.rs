//! The channel's socket and clock: non-blocking datagrams, the hybrid sleep/spin wait, and
//! socket buffer sizes.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::net::sockopt;

use super::DataError;

/// Socket buffer size requested in each direction. UDP never pushes back, so a burst the
/// receiving thread does not drain in time is lost unless the kernel can queue it.
pub const SOCKET_BUFFER_BYTES: usize = 8 << 20;
/// Longest single sleep, so that `cancel` and the progress report are looked at every few ms.
pub const MAX_SLEEP_US: u64 = 5_000;
/// The receive buffer: any UDP datagram fits, so none is silently truncated.
pub(super) const DATAGRAM_BUF_BYTES: usize = 65_536;
/// A wait longer than this sleeps in `poll(2)`; a shorter one spins (precise ports only).
const SPIN_BELOW_US: u64 = 1_000;
/// A precise sleep ends this much early and spins the rest: a sleeping thread wakes late
/// (timer slack is 50 us by default, and scheduling adds more).
const WAKE_EARLY_US: u64 = 200;
/// While spinning, remaining waits above this yield the core (another channel may need it);
/// below it, busy-wait.
const YIELD_ABOVE_US: u64 = 20;

static RCVBUF_WARNED: AtomicBool = AtomicBool::new(false);
static SNDBUF_WARNED: AtomicBool = AtomicBool::new(false);

/// One end's socket, its peer, and the channel clock (microseconds since the channel started).
pub(super) struct Port {
    socket: UdpSocket,
    peer: SocketAddr,
    start: Instant,
    /// Whether waits must end on time (a pacing sender) or may end late (a receiver, whose
    /// deadlines are timers of 10 ms and more).
    precise: bool,
}

impl Port {
    pub(super) fn new(
        socket: UdpSocket,
        peer: SocketAddr,
        precise: bool,
    ) -> Result<Self, DataError> {
        socket.set_nonblocking(true).map_err(DataError::Socket)?;
        size_buffers(&socket);
        Ok(Self { socket, peer, start: Instant::now(), precise })
    }

    /// Microseconds since the channel started, on a monotonic clock.
    pub(super) fn now_us(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    /// Takes one waiting datagram into `buf`, or returns `None` if none is waiting.
    pub(super) fn try_recv(&self, buf: &mut [u8]) -> Result<Option<usize>, DataError> {
        loop {
            match self.socket.recv_from(buf) {
                Ok((len, _from)) => return Ok(Some(len)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                // An ICMP error from an earlier send, reported once: the peer's idle timeout
                // decides whether it is gone.
                Err(e) if e.kind() == io::ErrorKind::Interrupted || is_transient(&e) => {}
                Err(e) => return Err(DataError::Socket(e)),
            }
        }
    }

    /// Sends one datagram to the peer. A full socket buffer is waited out (checking `cancel`);
    /// transient errors count as a lost packet, which the protocol repairs.
    pub(super) fn send(&self, datagram: &[u8], cancel: &AtomicBool) -> Result<(), DataError> {
        loop {
            match self.socket.send_to(datagram, self.peer) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if cancel.load(Ordering::Relaxed) {
                        return Err(DataError::Cancelled);
                    }
                    self.poll(PollFlags::OUT, MAX_SLEEP_US)?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_transient(&e) => return Ok(()),
                Err(e) => return Err(DataError::Socket(e)),
            }
        }
    }

    /// Waits until `deadline_us`, or less: a datagram arriving ends a sleep early, and no sleep
    /// lasts longer than [`MAX_SLEEP_US`]. The caller loops anyway.
    pub(super) fn wait(&self, deadline_us: u64) -> Result<(), DataError> {
        let now = self.now_us();
        let Some(wait) = deadline_us.checked_sub(now).filter(|w| *w > 0) else { return Ok(()) };
        if !self.precise {
            return self.poll(PollFlags::IN, wait.min(MAX_SLEEP_US));
        }
        if wait > SPIN_BELOW_US {
            return self.poll(PollFlags::IN, (wait - WAKE_EARLY_US).min(MAX_SLEEP_US));
        }
        loop {
            let left = deadline_us.saturating_sub(self.now_us());
            if left == 0 {
                return Ok(());
            }
            if left > YIELD_ABOVE_US {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Sleeps until the socket is ready for `flags` or `timeout_us` passes.
    fn poll(&self, flags: PollFlags, timeout_us: u64) -> Result<(), DataError> {
        let timeout = Timespec {
            tv_sec: (timeout_us / 1_000_000) as i64,
            tv_nsec: ((timeout_us % 1_000_000) * 1_000) as i64,
        };
        let mut fds = [PollFd::new(&self.socket, flags)];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
            Err(e) => Err(DataError::Socket(e.into())),
        }
    }
}

/// Errors after which the socket still works: ICMP reports of an earlier datagram, and a full
/// device queue. Both are a lost packet to the protocol.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
    ) || e.raw_os_error() == Some(rustix::io::Errno::NOBUFS.raw_os_error())
}

/// Asks for [`SOCKET_BUFFER_BYTES`] each way. As root, `SO_*BUFFORCE` gets past
/// `net.core.{r,w}mem_max`; otherwise a request above the cap is silently clamped, so the size is
/// read back and a clamp is reported once per process.
fn size_buffers(socket: &UdpSocket) {
    let granted = |force: fn(&UdpSocket, usize) -> rustix::io::Result<()>,
                   plain: fn(&UdpSocket, usize) -> rustix::io::Result<()>,
                   get: fn(&UdpSocket) -> rustix::io::Result<usize>| {
        if force(socket, SOCKET_BUFFER_BYTES).is_err() {
            // Not privileged: ask within the cap (clamped silently).
            let _ = plain(socket, SOCKET_BUFFER_BYTES);
        }
        // Linux reports twice the size set (half of it is the kernel's bookkeeping).
        get(socket).map(|n| if cfg!(target_os = "linux") { n / 2 } else { n }).unwrap_or(0)
    };
    let rcv = granted(
        |s, n| sockopt::set_socket_recv_buffer_size_force(s, n),
        |s, n| sockopt::set_socket_recv_buffer_size(s, n),
        |s| sockopt::socket_recv_buffer_size(s),
    );
    let snd = granted(
        |s, n| sockopt::set_socket_send_buffer_size_force(s, n),
        |s, n| sockopt::set_socket_send_buffer_size(s, n),
        |s| sockopt::socket_send_buffer_size(s),
    );
    warn_clamped(&RCVBUF_WARNED, "SO_RCVBUF", "net.core.rmem_max", rcv);
    warn_clamped(&SNDBUF_WARNED, "SO_SNDBUF", "net.core.wmem_max", snd);
}

fn warn_clamped(warned: &AtomicBool, option: &str, sysctl: &str, granted: usize) {
    if granted < SOCKET_BUFFER_BYTES && !warned.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            requested_bytes = SOCKET_BUFFER_BYTES,
            granted_bytes = granted,
            "the kernel clamped the data socket's {option}; bursts may be dropped at high \
             rates: raise {sysctl} (sysctl -w {sysctl}={SOCKET_BUFFER_BYTES}) or run as root"
        );
    }
}
