//! Socket buffers: what `Socket::new` reports matches the kernel, and root gets what it asks.

#[allow(unused)]
mod common;

use std::net::{Ipv4Addr, UdpSocket};

use common::skip_or_fail;
use rustix::net::sockopt;
use sluice_udp::Socket;

/// Whether this process may force buffers past the sysctl cap (root with CAP_NET_ADMIN).
fn can_force() -> bool {
    if !rustix::process::geteuid().is_root() {
        return false;
    }
    let probe = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    sockopt::set_socket_recv_buffer_size_force(&probe, 4096).is_ok()
        && sockopt::set_socket_send_buffer_size_force(&probe, 4096).is_ok()
}

#[test]
fn buffer_report_is_what_the_kernel_says() {
    let requested = 8 << 20;
    let a = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let peer = a.local_addr().unwrap();
    let (socket, report) = Socket::new(a, peer, requested).unwrap();
    assert_eq!(report.requested_bytes, requested);
    assert_eq!(report.recv_bytes, sockopt::socket_recv_buffer_size(socket.socket()).unwrap() / 2);
    assert_eq!(report.send_bytes, sockopt::socket_send_buffer_size(socket.socket()).unwrap() / 2);
    assert!(report.recv_bytes >= 1024 && report.send_bytes >= 1024);
    if can_force() {
        assert!(report.is_complete(), "forced buffers: {report:?}");
        assert!(report.recv_bytes >= requested && report.send_bytes >= requested);
    } else {
        skip_or_fail(&format!("cannot force buffers past the cap here; granted {report:?}"));
    }
}

#[test]
fn small_request_is_granted() {
    let a = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let peer = a.local_addr().unwrap();
    let (_, report) = Socket::new(a, peer, 64 * 1024).unwrap();
    // 64 KiB is under every default cap.
    assert!(report.is_complete(), "{report:?}");
}

#[test]
fn socket_is_non_blocking() {
    let a = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let peer = a.local_addr().unwrap();
    let (socket, _) = Socket::new(a, peer, 64 * 1024).unwrap();
    let mut buf = [0u8; 16];
    let e = socket.socket().recv_from(&mut buf).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
}
