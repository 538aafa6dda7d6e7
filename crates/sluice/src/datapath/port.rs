//! One channel's socket and clock: batches of datagrams through `sluice-udp`, and the hybrid
//! sleep/spin wait.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use sluice_udp::{RecvBatch, Socket};

use super::DataError;

/// Socket buffer size requested in each direction. The protocol keeps its own window, so the
/// kernel's buffers need not hold a bandwidth-delay product: they absorb a batch in flight and
/// the stalls of the thread that drains them (16 MiB is 13 ms at 10 Gbit/s). UDP never pushes
/// back, so what does not fit is lost. A smaller grant is reported once, with the sysctl to set.
pub const SOCKET_BUFFER_BYTES: usize = 16 << 20;
/// Longest single sleep, so that `cancel` and the progress report are looked at every few ms.
pub const MAX_SLEEP_US: u64 = 5_000;
/// A precise wait shorter than this spins; a longer one sleeps in `poll(2)` and lets the pacer
/// catch up on what a late wake-up cost (the sender sends in batches anyway).
const SPIN_BELOW_US: u64 = 60;
/// Bytes of one send batch: one GSO super-datagram at most (`sendmmsg` batches are held to the
/// same size, so one buffer of this size serves both).
pub(super) const BATCH_BYTES: usize = sluice_udp::GSO_MAX_BYTES;

/// One end's socket, its peer, and the transfer's clock (microseconds since the transfer
/// started; every channel of a transfer shares it, so times compare across channels).
pub(super) struct Port {
    socket: Socket,
    /// Times a send found the socket buffer full and waited (for the debug trace).
    pub(super) send_waits: std::cell::Cell<u64>,
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
        start: Instant,
    ) -> Result<Self, DataError> {
        let (socket, _report) =
            Socket::new(socket, peer, SOCKET_BUFFER_BYTES).map_err(DataError::Socket)?;
        Ok(Self { socket, start, precise, send_waits: std::cell::Cell::new(0) })
    }

    /// Microseconds since the transfer started, on a monotonic clock.
    pub(super) fn now_us(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    /// Datagrams of `segment_bytes` one batch may carry: what one system call takes, within
    /// [`BATCH_BYTES`].
    pub(super) fn batch_segments(&self, segment_bytes: usize) -> usize {
        let per_call = self.socket.segments_per_call(segment_bytes);
        per_call.min(BATCH_BYTES / segment_bytes.max(1)).max(1)
    }

    /// Takes what is waiting (one batch) into `batch`; returns the number of datagrams.
    pub(super) fn recv(&self, batch: &mut RecvBatch) -> Result<usize, DataError> {
        self.socket.recv_batch(batch).map_err(DataError::Socket)
    }

    /// Sends `data`, datagrams of `segment` bytes (the last may be shorter). A full socket
    /// buffer is waited out (checking `cancel`).
    pub(super) fn send(
        &self,
        mut data: &[u8],
        segment: usize,
        cancel: &AtomicBool,
    ) -> Result<(), DataError> {
        while !data.is_empty() {
            let sent =
                self.socket.send_batch(data, segment).map_err(|e| self.send_error(e, segment))?;
            data = &data[(sent * segment).min(data.len())..];
            if sent == 0 {
                self.send_waits.set(self.send_waits.get() + 1);
                if cancel.load(Ordering::Relaxed) {
                    return Err(DataError::Cancelled);
                }
                self.socket.wait(true, MAX_SLEEP_US).map_err(DataError::Socket)?;
            }
        }
        Ok(())
    }

    /// Waits until `deadline_us`, or less: a datagram arriving ends a sleep early, and no sleep
    /// lasts longer than [`MAX_SLEEP_US`]. The caller loops anyway.
    pub(super) fn wait(&self, deadline_us: u64) -> Result<(), DataError> {
        let now = self.now_us();
        let Some(wait) = deadline_us.checked_sub(now).filter(|w| *w > 0) else { return Ok(()) };
        if !self.precise || wait >= SPIN_BELOW_US {
            return self.socket.wait(false, wait.min(MAX_SLEEP_US)).map_err(DataError::Socket);
        }
        while self.now_us() < deadline_us {
            std::hint::spin_loop();
        }
        Ok(())
    }

    /// A send error as the user should read it: a datagram the path refuses as too large
    /// (`EMSGSIZE`: the kernel learned a smaller path MTU since the start) names the size that
    /// fits now.
    fn send_error(&self, e: io::Error, segment: usize) -> DataError {
        if !sluice_udp::is_too_big(&e) {
            return DataError::Socket(e);
        }
        too_large(self.socket.socket(), self.socket.peer(), segment).unwrap_or(
            DataError::PacketTooLarge { packet_bytes: segment, max_bytes: None, path_mtu: None },
        )
    }
}

/// The path MTU check at the start of a sending channel: datagrams of `packet_bytes` must fit
/// the path MTU the kernel knows toward `peer` (the route's, or less if ICMP taught it less).
/// Don't-fragment is set on every data socket, so a larger datagram could never arrive.
pub(super) fn check_path_mtu(
    socket: &UdpSocket,
    peer: SocketAddr,
    packet_bytes: usize,
) -> Result<(), DataError> {
    too_large(socket, peer, packet_bytes).map_or(Ok(()), Err)
}

/// [`DataError::PacketTooLarge`] if the kernel knows a path MTU toward `peer` that datagrams of
/// `packet_bytes` exceed.
fn too_large(socket: &UdpSocket, peer: SocketAddr, packet_bytes: usize) -> Option<DataError> {
    let mtu = sluice_udp::path_mtu(socket, peer)?;
    let max_bytes = sluice_udp::max_payload(mtu, peer);
    (packet_bytes > max_bytes).then_some(DataError::PacketTooLarge {
        packet_bytes,
        max_bytes: Some(max_bytes),
        path_mtu: Some(mtu),
    })
}
