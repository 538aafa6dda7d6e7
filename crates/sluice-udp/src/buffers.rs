//! Socket buffer sizing: forced past the sysctl cap when privileged, read back honestly, and a
//! shortfall reported once per process.

use std::io;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::net::sockopt;

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

impl BufferReport {
    /// Whether both directions got at least what was asked for.
    pub fn is_complete(&self) -> bool {
        self.recv_bytes >= self.requested_bytes && self.send_bytes >= self.requested_bytes
    }
}

/// The kernel keeps buffer sizes in an `int` and doubles the request: larger requests are
/// clamped here.
const MAX_REQUEST_BYTES: usize = (i32::MAX / 2) as usize;

/// Set once the shortfall warning has been logged: one per process, not per socket.
static WARNED: AtomicBool = AtomicBool::new(false);

/// Sizes both buffers of `socket` to `bytes`: `SO_RCVBUFFORCE`/`SO_SNDBUFFORCE` first (root, or
/// `CAP_NET_ADMIN`, gets past `net.core.rmem_max`/`wmem_max`), else the plain options, which the
/// kernel clamps silently. Reads the sizes back and warns once per process when short.
pub(crate) fn size_buffers(socket: &UdpSocket, bytes: usize) -> io::Result<BufferReport> {
    let want = bytes.min(MAX_REQUEST_BYTES);
    if sockopt::set_socket_recv_buffer_size_force(socket, want).is_err() {
        sockopt::set_socket_recv_buffer_size(socket, want)?;
    }
    if sockopt::set_socket_send_buffer_size_force(socket, want).is_err() {
        sockopt::set_socket_send_buffer_size(socket, want)?;
    }
    // Linux reports twice the usable size (the other half is its bookkeeping allowance).
    let report = BufferReport {
        requested_bytes: bytes,
        recv_bytes: sockopt::socket_recv_buffer_size(socket)? / 2,
        send_bytes: sockopt::socket_send_buffer_size(socket)? / 2,
    };
    if !report.is_complete() && !WARNED.swap(true, Ordering::Relaxed) {
        warn_short(&report);
    }
    Ok(report)
}

fn warn_short(report: &BufferReport) {
    let n = report.requested_bytes.min(MAX_REQUEST_BYTES);
    let mut fix = Vec::with_capacity(2);
    if report.recv_bytes < report.requested_bytes {
        fix.push(format!("sysctl -w net.core.rmem_max={n}"));
    }
    if report.send_bytes < report.requested_bytes {
        fix.push(format!("sysctl -w net.core.wmem_max={n}"));
    }
    tracing::warn!(
        requested_bytes = report.requested_bytes,
        recv_bytes = report.recv_bytes,
        send_bytes = report.send_bytes,
        "UDP socket buffers smaller than requested: {} B receive and {} B send granted of {} B \
         asked; the kernel capped them (run as root, or raise the cap: `{}`). Later sockets are \
         not reported again.",
        report.recv_bytes,
        report.send_bytes,
        report.requested_bytes,
        fix.join("` and `"),
    );
}
