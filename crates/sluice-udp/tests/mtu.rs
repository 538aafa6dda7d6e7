//! Path MTU and don't-fragment: what the kernel says on loopback, `EMSGSIZE` above the path.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

use common::{assert_same, batch, recv_n, send_all};
use rustix::net::sockopt::{self, Ipv4PathMtuDiscovery, Ipv6PathMtuDiscovery};
use sluice_udp::{Socket, is_too_big, max_payload, path_mtu, set_dont_fragment};

#[test]
fn path_mtu_on_loopback_is_the_loopback_mtu() {
    let a = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let b = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let mtu = path_mtu(&a, b.local_addr().unwrap()).expect("loopback MTU known");
    // Linux's loopback MTU is 65536 unless someone changed it.
    assert!((16_384..=65_536).contains(&mtu), "loopback MTU {mtu}");
    if common::ipv6_loopback_or_skip() {
        let c = UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)).unwrap();
        let d = UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)).unwrap();
        let mtu6 = path_mtu(&c, d.local_addr().unwrap()).expect("IPv6 loopback MTU known");
        // The same device, but IPv4 caps what it reports at 65535 (its largest packet).
        assert!((16_384..=65_536).contains(&mtu6), "IPv6 loopback MTU {mtu6}");
        // An IPv4 peer from an IPv6-only local address has no path.
        assert_eq!(path_mtu(&a, d.local_addr().unwrap()), None);
    }
}

#[test]
fn dont_fragment_is_set_on_both_families() {
    let a = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    set_dont_fragment(&a).unwrap();
    assert_eq!(sockopt::ip_mtu_discover(&a).unwrap(), Ipv4PathMtuDiscovery::DO);
    if common::ipv6_loopback_or_skip() {
        let b = UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)).unwrap();
        set_dont_fragment(&b).unwrap();
        assert_eq!(sockopt::ipv6_mtu_discover(&b).unwrap(), Ipv6PathMtuDiscovery::DO);
    }
    // Socket::new sets it too.
    let c = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let peer = c.local_addr().unwrap();
    let (socket, _) = Socket::new(c, peer, 64 * 1024).unwrap();
    assert_eq!(sockopt::ip_mtu_discover(socket.socket()).unwrap(), Ipv4PathMtuDiscovery::DO);
}

#[test]
fn datagram_above_what_udp_carries_is_emsgsize() {
    let (tx, rx) = common::pair();
    let too_big = vec![0u8; 65_508];
    for gso in [true, false] {
        if !gso {
            tx.disable_gso();
        }
        let e = tx.send_batch(&too_big, too_big.len()).unwrap_err();
        assert!(is_too_big(&e), "expected EMSGSIZE, got {e}");
        // The socket still works afterwards, and a GSO failure of this kind keeps GSO.
        let want = batch(5, 3, 1452, 1452);
        send_all(&tx, &want, 1452);
        assert_same(&recv_n(&rx, 3), &want);
    }
}

/// In a private network namespace (root only) with loopback at MTU 1500: don't-fragment makes
/// a datagram one byte above the path fail with EMSGSIZE, with and without GSO, and GSO stays
/// on because the size, not the device, was at fault.
#[test]
fn emsgsize_above_path_mtu_with_dont_fragment() {
    common::in_private_netns(
        &[&["ip", "link", "set", "lo", "mtu", "1500", "up"]],
        check_path_of_1500,
    );
}

fn check_path_of_1500() {
    let a = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let b = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    assert_eq!(path_mtu(&a, b_addr), Some(1500));
    let fits = max_payload(1500, b_addr);
    assert_eq!(fits, 1472);
    let (tx, _) = Socket::new(a, b_addr, common::BUFFER_BYTES).unwrap();
    let (rx, _) = Socket::new(b, a_addr, common::BUFFER_BYTES).unwrap();
    let gso_at_start = tx.gso();

    // One byte too many: refused, not fragmented, as one datagram and as a GSO batch.
    let e = tx.send_batch(&vec![1u8; fits + 1], fits + 1).unwrap_err();
    assert!(is_too_big(&e), "single datagram: {e}");
    let e = tx.send_batch(&vec![1u8; 10 * (fits + 1)], fits + 1).unwrap_err();
    assert!(is_too_big(&e), "batch: {e}");
    assert_eq!(tx.gso(), gso_at_start, "a size error does not turn GSO off");

    // What fits goes through whole.
    let want = batch(11, 30, fits, fits);
    send_all(&tx, &want, fits);
    assert_same(&recv_n(&rx, 30), &want);

    // Without don't-fragment the kernel would fragment instead: the contrast this guards.
    let c = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    sockopt::set_ip_mtu_discover(&c, Ipv4PathMtuDiscovery::DONT).unwrap();
    c.send_to(&vec![2u8; fits + 1], SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9))
        .expect("fragmented send");
}
