//! A client's first datagrams of a session, sent twice.
//!
//! On a lossy path one lost datagram of the session's first flights costs a QUIC probe
//! timeout, which before any round trip is measured is most of a second, and the packets sent
//! behind it can be lost with it. Traced through linkem at 300 ms and 1 % loss both ways (a
//! 128 MiB download from path memory, 4.69 s where its neighbours took 1.9): the datagram with
//! the client's `Finished` was lost; the server did not take the client's request packets that
//! came before the handshake completed (its acknowledgement later listed them lost); the probe
//! timeout resent `Finished` 0.90 s later, a second one found the request lost another 0.96 s
//! later, and the session opened 2.76 s after `connecting` instead of 0.60.
//!
//! So the client's endpoint sends its first [`DOUBLED_TRANSMITS`] transmits twice, back to back:
//! a flight is then lost only if both copies are (1 in 10,000 at 1 % random loss). QUIC drops
//! a packet it has seen (a repeated packet number) and counts it nowhere; the copies are a few
//! kilobytes a session. Only the client's: a server's first flight is bound by QUIC's
//! anti-amplification limit (three times what the client sent), which copies the connection does
//! not know of would break.

use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};

/// Transmits a client's endpoint sends twice: its `Initial`, then the flight that completes the
/// handshake and carries its first requests, with the acknowledgements and path MTU probes
/// among them (eight transmits in the trace), with room for a retransmission.
pub(crate) const DOUBLED_TRANSMITS: u32 = 16;

/// A socket that sends its first `doubled` transmits twice.
pub(crate) struct FirstFlightTwice {
    inner: Arc<dyn AsyncUdpSocket>,
    left: AtomicU32,
}

impl FirstFlightTwice {
    pub(crate) fn new(inner: Arc<dyn AsyncUdpSocket>, doubled: u32) -> Self {
        Self { inner, left: AtomicU32::new(doubled) }
    }
}

impl fmt::Debug for FirstFlightTwice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FirstFlightTwice").field("left", &self.left).finish_non_exhaustive()
    }
}

impl AsyncUdpSocket for FirstFlightTwice {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        self.inner.try_send(transmit)?;
        let take = |left: u32| left.checked_sub(1);
        if self.left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, take).is_ok() {
            // The copy is a spare: the first went, so a full socket buffer loses nothing.
            let _ = self.inner.try_send(transmit);
        }
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        self.inner.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

/// A client's QUIC endpoint on a UDP socket bound at `bind`, its first flights sent twice:
/// `quinn::Endpoint::client` on the wrapper, its IPv6 socket dual-stack as quinn makes it.
pub(crate) fn client_endpoint(bind: SocketAddr) -> io::Result<quinn::Endpoint> {
    use rustix::net::{AddressFamily, SocketType, ipproto, sockopt};
    let family = if bind.is_ipv6() { AddressFamily::INET6 } else { AddressFamily::INET };
    let fd = rustix::net::socket(family, SocketType::DGRAM, Some(ipproto::UDP))?;
    if bind.is_ipv6()
        && let Err(e) = sockopt::set_ipv6_v6only(&fd, false)
    {
        tracing::debug!(%e, "unable to make socket dual-stack");
    }
    rustix::net::bind(&fd, &bind)?;
    let socket = std::net::UdpSocket::from(fd);
    let runtime: Arc<dyn quinn::Runtime> = Arc::new(quinn::TokioRuntime);
    let inner = runtime.wrap_udp_socket(socket)?;
    let socket = Arc::new(FirstFlightTwice::new(inner, DOUBLED_TRANSMITS));
    quinn::Endpoint::new_with_abstract_socket(
        quinn::EndpointConfig::default(),
        None,
        socket,
        runtime,
    )
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, UdpSocket};
    use std::time::Duration;

    use quinn::Runtime;

    use super::*;

    /// The first `doubled` transmits reach the peer twice, the later ones once.
    #[tokio::test]
    async fn the_first_transmits_go_twice_and_the_rest_once() {
        let peer = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        peer.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        let bound = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let inner = quinn::TokioRuntime.wrap_udp_socket(bound).unwrap();
        let socket = Arc::new(FirstFlightTwice::new(inner, 2));
        let mut poller = socket.clone().create_io_poller();
        let to = peer.local_addr().unwrap();
        for n in 0u8..4 {
            std::future::poll_fn(|cx| poller.as_mut().poll_writable(cx)).await.unwrap();
            let contents = [n; 8];
            let transmit = Transmit {
                destination: to,
                ecn: None,
                contents: &contents,
                segment_size: None,
                src_ip: None,
            };
            socket.try_send(&transmit).unwrap();
        }
        let mut seen = Vec::new();
        let mut buf = [0u8; 64];
        while let Ok(len) = peer.recv(&mut buf) {
            assert_eq!(len, 8);
            seen.push(buf[0]);
        }
        assert_eq!(seen, [0, 0, 1, 1, 2, 3]);
    }
}
