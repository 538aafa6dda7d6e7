//! The session's QUIC connection carried over TCP, for paths that block UDP (issue 30).
//!
//! Each QUIC datagram travels on a TCP connection as a frame: a u16 big-endian length and the
//! datagram. To quinn a set of such connections is one more UDP socket ([`TcpDatagrams`]):
//! what arrives on any of them is a datagram from its peer's address, and what quinn sends to
//! an address goes out on that peer's connection. So the session over TCP is the very session
//! over UDP (the same TLS 1.3 handshake, identity, pinning, tokens, messages and machines),
//! only on another socket, as iroh carries QUIC over its relays.
//!
//! A TCP connection to a server's port opens with an 8-byte preface that says what it carries
//! ([`Preface`]): a tunnelled session, or one of a transfer's data streams
//! ([`super::streams`]). QUIC's own loss recovery and congestion control run on top of TCP's;
//! for the session's small messages that costs nothing that matters, and the file bytes go on
//! data streams of their own, with TCP's congestion control alone.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
use tracing::debug;

use super::lock;

/// What a TCP connection to a server's port carries, said in its first 8 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Preface {
    /// A session: QUIC datagrams in frames.
    Session,
    /// One data stream of a transfer: a [`super::streams`] hello follows.
    Data,
}

impl Preface {
    const SESSION: [u8; 8] = *b"SLUICEQ1";
    const DATA: [u8; 8] = *b"SLUICED1";

    pub(crate) fn bytes(self) -> [u8; 8] {
        match self {
            Preface::Session => Self::SESSION,
            Preface::Data => Self::DATA,
        }
    }

    pub(crate) fn parse(bytes: &[u8; 8]) -> Option<Preface> {
        match *bytes {
            Self::SESSION => Some(Preface::Session),
            Self::DATA => Some(Preface::Data),
            _ => None,
        }
    }
}

/// The largest datagram a frame may carry: QUIC's packets here are at most its path MTU's
/// (1452 bytes unless MTU discovery finds more, capped at 1452 by quinn's defaults), so this
/// bounds what a peer that sends junk can make the server hold ([`INBOUND_QUEUE`] of them).
const MAX_DATAGRAM: usize = 4096;

/// Datagrams queued toward one peer before more are dropped (as a full UDP socket buffer
/// drops them; QUIC sends them again). QUIC's congestion window keeps far fewer in flight.
const PEER_QUEUE: usize = 4096;

/// Datagrams from every peer waiting for the endpoint to read them (16 MiB at most).
const INBOUND_QUEUE: usize = 4096;

/// A tunnel that carried nothing for this long is closed: longer than any QUIC idle timeout
/// of Sluice's, so only a connection whose QUIC side is gone meets it.
const TUNNEL_IDLE: Duration = Duration::from_secs(120);

/// QUIC datagrams over TCP connections, one per peer, as one socket for a quinn endpoint.
/// Dropping it closes them all (what is queued is written first).
pub(crate) struct TcpDatagrams {
    local: SocketAddr,
    inbound: Mutex<mpsc::Receiver<(SocketAddr, Vec<u8>)>>,
    arrive: mpsc::Sender<(SocketAddr, Vec<u8>)>,
    peers: Arc<Mutex<Peers>>,
}

/// Each peer's queue toward its connection, and its connection's reader.
#[derive(Default)]
struct Peers {
    by_addr: HashMap<SocketAddr, (u64, mpsc::Sender<Vec<u8>>)>,
    readers: HashMap<u64, tokio::task::AbortHandle>,
    next: u64,
}

impl fmt::Debug for TcpDatagrams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpDatagrams").field("local", &self.local).finish_non_exhaustive()
    }
}

impl TcpDatagrams {
    /// A socket whose address is `local` (a listener's, or a connection's own), with no peer yet.
    pub(crate) fn new(local: SocketAddr) -> Arc<TcpDatagrams> {
        let (arrive, inbound) = mpsc::channel(INBOUND_QUEUE);
        Arc::new(TcpDatagrams {
            local,
            inbound: Mutex::new(inbound),
            arrive,
            peers: Arc::default(),
        })
    }

    /// The connections it carries now.
    pub(crate) fn connections(&self) -> usize {
        lock(&self.peers).readers.len()
    }

    /// Carries datagrams to and from the peer at the other end of `stream` (its preface already
    /// sent or read). The connection closes when the peer closes it, when it carries nothing for
    /// [`TUNNEL_IDLE`], or when this socket is dropped.
    pub(crate) fn attach(&self, stream: TcpStream) -> io::Result<()> {
        let peer = stream.peer_addr()?;
        let _ = stream.set_nodelay(true);
        let (read, write) = stream.into_split();
        let (queue, outbound) = mpsc::channel(PEER_QUEUE);
        tokio::spawn(write_frames(write, outbound));
        let (arrive, peers) = (self.arrive.clone(), self.peers.clone());
        let mut held = lock(&self.peers);
        let id = held.next;
        held.next += 1;
        // A newer connection from the same address takes the place of an older one.
        held.by_addr.insert(peer, (id, queue));
        let reader = tokio::spawn(async move {
            if let Err(e) = read_frames(read, peer, &arrive).await {
                debug!(%peer, error = %e, "a session's TCP connection ended");
            }
            let mut peers = lock(&peers);
            peers.readers.remove(&id);
            if peers.by_addr.get(&peer).is_some_and(|(held, _)| *held == id) {
                peers.by_addr.remove(&peer); // its writer ends once it wrote what is queued
            }
        });
        held.readers.insert(id, reader.abort_handle());
        Ok(())
    }
}

impl Drop for TcpDatagrams {
    fn drop(&mut self) {
        let mut peers = lock(&self.peers);
        peers.by_addr.clear();
        for (_, reader) in peers.readers.drain() {
            reader.abort();
        }
    }
}

/// Reads frames until the peer closes, fails, or goes quiet; each datagram goes to `arrive`.
async fn read_frames(
    mut read: OwnedReadHalf,
    peer: SocketAddr,
    arrive: &mpsc::Sender<(SocketAddr, Vec<u8>)>,
) -> io::Result<()> {
    loop {
        let mut len = [0u8; 2];
        match tokio::time::timeout(TUNNEL_IDLE, read.read_exact(&mut len)).await {
            Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "idle")),
            Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Ok(r) => r?,
        };
        let len = u16::from_be_bytes(len) as usize;
        if len > MAX_DATAGRAM {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "a frame over 4096 bytes"));
        }
        let mut datagram = vec![0u8; len];
        read.read_exact(&mut datagram).await?;
        if arrive.send((peer, datagram)).await.is_err() {
            return Ok(()); // the socket is gone
        }
    }
}

/// Writes each queued datagram as a frame, flushing whenever the queue runs dry.
async fn write_frames(write: OwnedWriteHalf, mut outbound: mpsc::Receiver<Vec<u8>>) {
    let mut write = BufWriter::with_capacity(64 << 10, write);
    while let Some(datagram) = outbound.recv().await {
        let mut next = Some(datagram);
        while let Some(datagram) = next {
            let len = (datagram.len() as u16).to_be_bytes();
            if write.write_all(&len).await.is_err() || write.write_all(&datagram).await.is_err() {
                return;
            }
            next = outbound.try_recv().ok();
        }
        if write.flush().await.is_err() {
            return;
        }
    }
    let _ = write.shutdown().await;
}

impl AsyncUdpSocket for TcpDatagrams {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(AlwaysWritable)
    }

    fn try_send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        let Some((_, queue)) = lock(&self.peers).by_addr.get(&transmit.destination).cloned() else {
            // No connection to that address (it closed): as a datagram to nowhere.
            return Ok(());
        };
        let size = transmit.segment_size.unwrap_or(transmit.contents.len()).max(1);
        for datagram in transmit.contents.chunks(size) {
            if datagram.len() > MAX_DATAGRAM {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "datagram too large"));
            }
            // A full queue drops, as a full socket buffer would.
            let _ = queue.try_send(datagram.to_vec());
        }
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let mut inbound = lock(&self.inbound);
        let mut filled = 0;
        while filled < bufs.len().min(meta.len()) {
            let next = match filled {
                0 => match inbound.poll_recv(cx) {
                    Poll::Ready(next) => next,
                    Poll::Pending => return Poll::Pending,
                },
                _ => inbound.try_recv().ok(),
            };
            let Some((from, datagram)) = next else { break };
            let buf = &mut bufs[filled];
            if datagram.len() > buf.len() {
                continue; // larger than quinn reads: dropped, as a truncated datagram would be
            }
            buf[..datagram.len()].copy_from_slice(&datagram);
            meta[filled] = RecvMeta {
                addr: from,
                len: datagram.len(),
                stride: datagram.len(),
                ecn: None,
                dst_ip: Some(self.local.ip()),
            };
            filled += 1;
        }
        match filled {
            // The socket is dropped everywhere but here: nothing will come.
            0 => Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "tunnel closed"))),
            n => Poll::Ready(Ok(n)),
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    fn may_fragment(&self) -> bool {
        false
    }
}

/// Sending never waits: a full peer queue drops instead.
#[derive(Debug)]
struct AlwaysWritable;

impl UdpPoller for AlwaysWritable {
    fn poll_writable(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A quinn endpoint on `socket`; a server's when `server` is given.
pub(crate) fn endpoint(
    socket: Arc<TcpDatagrams>,
    server: Option<quinn::ServerConfig>,
) -> io::Result<quinn::Endpoint> {
    quinn::Endpoint::new_with_abstract_socket(
        quinn::EndpointConfig::default(),
        server,
        socket,
        Arc::new(quinn::TokioRuntime),
    )
}

/// Connects to a server's TCP port for a tunnelled session: the connection and its preface.
/// The endpoint ([`endpoint`] on a [`TcpDatagrams`] with this connection attached) then
/// connects to `server` as over UDP.
pub(crate) async fn dial(server: SocketAddr, wait: Duration) -> io::Result<Arc<TcpDatagrams>> {
    let mut stream = match tokio::time::timeout(wait, TcpStream::connect(server)).await {
        Ok(r) => r?,
        Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "no answer")),
    };
    stream.write_all(&Preface::Session.bytes()).await?;
    let socket = TcpDatagrams::new(stream.local_addr()?);
    socket.attach(stream)?;
    Ok(socket)
}
