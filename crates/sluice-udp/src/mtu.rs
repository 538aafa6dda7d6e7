//! Path MTU: what the kernel knows toward a peer, and don't-fragment so that a datagram larger
//! than the path fails with `EMSGSIZE` instead of leaving as fragments.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};

use rustix::net::sockopt::{self, Ipv4PathMtuDiscovery, Ipv6PathMtuDiscovery};

/// The path MTU the kernel knows toward `peer` from `socket`'s address (the route's MTU or a
/// smaller one learned from ICMP), or `None` if it cannot say.
///
/// Asks through a throwaway UDP socket bound to the same local IP and connected to `peer`
/// (`IP_MTU` / `IPV6_MTU` need a connected socket); `socket` itself is left untouched.
pub fn path_mtu(socket: &UdpSocket, peer: SocketAddr) -> Option<usize> {
    let local = socket.local_addr().ok()?.ip();
    let peer = unmap(peer);
    let bind_ip = match (local, peer) {
        (IpAddr::V4(ip), SocketAddr::V4(_)) => IpAddr::V4(ip),
        (IpAddr::V6(ip), SocketAddr::V6(_)) => IpAddr::V6(ip),
        // A dual-stack IPv6 socket toward an IPv4 peer: ask over IPv4 from the same address.
        (IpAddr::V6(ip), SocketAddr::V4(_)) => {
            IpAddr::V4(ip.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED))
        }
        (IpAddr::V4(_), SocketAddr::V6(_)) => return None,
    };
    let probe = UdpSocket::bind((bind_ip, 0)).ok()?;
    probe.connect(peer).ok()?;
    let mtu = match peer {
        SocketAddr::V4(_) => sockopt::ip_mtu(&probe),
        SocketAddr::V6(_) => sockopt::ipv6_mtu(&probe),
    }
    .ok()?;
    (mtu > 0).then_some(mtu as usize)
}

/// The largest UDP payload that fits in one IP packet of `path_mtu` bytes toward `peer` (IPv4:
/// 20-byte IP header, IPv6: 40, plus 8 for UDP; no IP options).
pub fn max_payload(path_mtu: usize, peer: SocketAddr) -> usize {
    let ip_header = match unmap(peer) {
        SocketAddr::V4(_) => 20,
        SocketAddr::V6(_) => 40,
    };
    path_mtu.saturating_sub(ip_header + 8)
}

/// Sets don't-fragment on `socket` (`IP_MTU_DISCOVER` = `IP_PMTUDISC_DO`, and
/// `IPV6_MTU_DISCOVER` = `IPV6_PMTUDISC_DO` on IPv6): a datagram larger than the path MTU the
/// kernel knows fails with `EMSGSIZE` instead of being fragmented, and routers on the way drop
/// rather than fragment it (their ICMP reports lower the path MTU [`path_mtu`] returns).
///
/// On a dual-stack IPv6 socket the IPv4 option is set too, for IPv4-mapped peers.
pub fn set_dont_fragment(socket: &UdpSocket) -> io::Result<()> {
    match socket.local_addr()? {
        SocketAddr::V4(_) => sockopt::set_ip_mtu_discover(socket, Ipv4PathMtuDiscovery::DO)?,
        SocketAddr::V6(_) => {
            sockopt::set_ipv6_mtu_discover(socket, Ipv6PathMtuDiscovery::DO)?;
            // Only meaningful for IPv4-mapped traffic; an IPv6-only socket may refuse it.
            let _ = sockopt::set_ip_mtu_discover(socket, Ipv4PathMtuDiscovery::DO);
        }
    }
    Ok(())
}

/// An IPv4-mapped IPv6 address as the IPv4 address it stands for.
fn unmap(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), v6.port()),
            None => addr,
        },
        SocketAddr::V4(_) => addr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;

    #[test]
    fn payload_subtracts_headers() {
        let v4 = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 1);
        let v6 = SocketAddr::new(Ipv6Addr::LOCALHOST.into(), 1);
        let mapped = SocketAddr::new(Ipv4Addr::LOCALHOST.to_ipv6_mapped().into(), 1);
        assert_eq!(max_payload(1500, v4), 1472);
        assert_eq!(max_payload(1500, v6), 1452);
        assert_eq!(max_payload(1500, mapped), 1472);
        assert_eq!(max_payload(10, v6), 0);
    }
}
