//! What the client and the server share around a data channel: the negotiated specification,
//! channel settings, the blocking task that runs the channel, and error mapping.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sluice_proto::cc::CcKind;
use sluice_proto::config::ChannelConfig;
pub(crate) use sluice_session::negotiate::Negotiated;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::keys::{ChannelRef, ChannelSecrets, Role, SessionId};
use super::messages::{FrameError, Spec};
use super::streams::{Opener, PendingStream, StreamsPlan};
use super::transport::TCP_STREAMS;
use super::{DATA_IDLE_TIMEOUT, MAX_CHANNELS, SessionError, connection_error};
use crate::datapath::tcp::{Growth, StreamConfig};
use crate::datapath::{ChannelParams, ChannelReport, DataError, ReceivedExtents};

/// Initial congestion window of the session's QUIC connection. A manifest of 10,000 files is
/// about 1 MB of JSON sent before any data moves: from quinn's default window (about 14 kB) slow
/// start needs 7 round trips for it, 0.7 s on a 100 ms path; from 256 KiB it needs 3. The burst
/// is 2 ms of a 1 Gbit/s link.
pub(crate) const CONTROL_INITIAL_WINDOW_BYTES: u64 = 256 << 10;

/// The QUIC transport settings both ends start from: a larger initial window (see
/// [`CONTROL_INITIAL_WINDOW_BYTES`]).
pub(crate) fn control_transport() -> quinn::TransportConfig {
    let mut transport = quinn::TransportConfig::default();
    let mut cubic = quinn::congestion::CubicConfig::default();
    cubic.initial_window(CONTROL_INITIAL_WINDOW_BYTES);
    transport.congestion_controller_factory(Arc::new(cubic));
    transport
}

/// Deadline for a reply that needs no real work from the peer.
pub(crate) const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// Deadline for the handshake's messages.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// For fuzzing: a client's proposal is refused, or every choice the server can make from it
/// stays within bounds and is a proposal the client accepts in `Welcome`.
pub(crate) fn check_spec(spec: &Spec) {
    let Ok(proposed) = Negotiated::from_spec(spec) else { return };
    for (max, cap) in [(1, None), (MAX_CHANNELS, Some(1_000_000)), (4, Some(u64::MAX))] {
        let chosen = proposed.choose(max, cap);
        assert!((1..=max).contains(&chosen.channels), "{chosen:?}");
        if let Some(cap) = cap {
            assert!(chosen.rate_bps > 0 && chosen.rate_bps <= cap, "{chosen:?}");
        }
        assert!(chosen.rate_bps == 0 || chosen.min_rate_bps <= chosen.rate_bps, "{chosen:?}");
        let welcome = chosen.to_spec();
        assert_eq!(Negotiated::from_spec(&welcome), Ok(chosen), "the client refuses {welcome:?}");
    }
}

/// The datagram size a client proposes unless told otherwise: the largest that fits a 1500-byte
/// path MTU over IPv4 (20 bytes of IP header, 8 of UDP). [`fit_packet_size`] lowers it where
/// the path carries less (1452 over IPv6).
pub const DEFAULT_PACKET_SIZE: usize = 1472;

/// Local channel settings both ends start from: the protocol defaults with a short idle timeout
/// (a dead peer is noticed in seconds), a pacer that may catch up after a late wake-up, and
/// [`DEFAULT_PACKET_SIZE`].
pub fn default_channel_config() -> ChannelConfig {
    ChannelConfig {
        idle_timeout_us: DATA_IDLE_TIMEOUT.as_micros() as u64,
        max_burst_pkts: crate::datapath::REAL_TIME_BURST_PKTS,
        packet_size: DEFAULT_PACKET_SIZE,
        ..ChannelConfig::default()
    }
}

/// The datagram size to propose toward `server`: [`DEFAULT_PACKET_SIZE`] lowered to the largest
/// datagram that fits the path MTU the kernel knows toward `server` (the route's, or less where
/// ICMP taught it less: 1452 over IPv6 at 1500); any other size as given, which the data
/// channels refuse at their start, naming the size that fits, if the path cannot carry it.
pub(crate) fn fit_packet_size(packet_size: usize, server: SocketAddr) -> usize {
    if packet_size != DEFAULT_PACKET_SIZE {
        return packet_size;
    }
    let unspecified: IpAddr = match server {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let mtu = UdpSocket::bind((unspecified, 0))
        .ok()
        .and_then(|socket| sluice_udp::path_mtu(&socket, server));
    let fitted =
        mtu.map_or(packet_size, |mtu| packet_size.min(sluice_udp::max_payload(mtu, server)));
    if fitted != packet_size {
        tracing::debug!(
            packet_size = fitted,
            path_mtu = mtu,
            "default packet size fitted to the path"
        );
    }
    fitted
}

/// Everything one end needs to start the data channels of a request.
#[derive(Clone, Copy)]
pub(crate) struct ChannelSetup<'a> {
    pub(crate) conn: &'a quinn::Connection,
    pub(crate) role: Role,
    pub(crate) session_id: SessionId,
    pub(crate) negotiated: Negotiated,
    pub(crate) base: &'a ChannelConfig,
    pub(crate) request_id: u64,
    /// The data phase within the request: 0 for the transfer, then one per repair round. Each
    /// phase's channels have keys of their own, so no packet number is used twice under a key.
    pub(crate) phase: u32,
    /// `None` when the data moves on UDP channels; over TCP (the session came over TCP), how
    /// this end gets its streams.
    pub(crate) streams: Option<Opener<'a>>,
    /// Set when a data phase over UDP got nothing through from its start
    /// ([`DataError::NothingThrough`]) or this host refused its sends: the path carries the
    /// session but not the data channels (a firewall that lets only the server's port
    /// through). A client's, to take the transfer up over TCP.
    pub(crate) udp_blocked: Option<&'a AtomicBool>,
}

impl ChannelSetup<'_> {
    /// What a failed data phase means to the user ([`data_error`]), noting a UDP path that
    /// carried nothing, or that this host's own firewall refused (a send denied: `EPERM`).
    pub(crate) fn data_error(&self, err: DataError) -> SessionError {
        let blocked = match &err {
            DataError::NothingThrough { .. } => true,
            DataError::Socket(e) => e.kind() == std::io::ErrorKind::PermissionDenied,
            _ => false,
        };
        if blocked && let Some(blocked) = self.udp_blocked {
            blocked.store(true, Ordering::Relaxed);
        }
        data_error(err, self.conn)
    }
}

impl ChannelSetup<'_> {
    /// Derives every channel's keys and settings and joins them with this end's sockets and
    /// the peer's ports (one per negotiated channel, channel 0 first) on `peer_ip`.
    pub(crate) fn params(
        &self,
        sockets: Vec<UdpSocket>,
        peer_ip: IpAddr,
        peer_ports: &[u16],
    ) -> Result<Vec<ChannelParams>, SessionError> {
        let channels = self.negotiated.channels as usize;
        if peer_ports.len() != channels || sockets.len() != channels {
            return Err(SessionError::Protocol(format!(
                "{} data ports for {channels} negotiated channels",
                peer_ports.len()
            )));
        }
        sockets
            .into_iter()
            .zip(peer_ports)
            .enumerate()
            .map(|(index, (socket, &port))| {
                self.channel(index as u32, socket, SocketAddr::new(peer_ip, port))
            })
            .collect()
    }

    /// This phase's TCP data streams (one per negotiated channel), to open through `opener`.
    pub(crate) fn streams(&self, opener: Opener<'_>) -> Result<StreamsPlan, SessionError> {
        let pending = (0..self.negotiated.channels)
            .map(|index| {
                let channel = self.phase * MAX_CHANNELS + index;
                let at = ChannelRef {
                    session_id: self.session_id,
                    request_id: self.request_id,
                    channel,
                };
                PendingStream::derive(self.conn, &at)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let base = self.negotiated.apply(self.base);
        let config = StreamConfig {
            idle_timeout_us: base.idle_timeout_us,
            rate_bps: self.negotiated.rate_bps,
            min_rate_bps: self.negotiated.min_rate_bps,
            rtt_hint_us: self.conn.rtt().as_micros() as u64,
            right_size: true,
            growth: growth(&self.negotiated),
            start_streams: TCP_STREAMS,
        };
        Ok(StreamsPlan {
            pending,
            role: self.role,
            aead: self.negotiated.aead,
            config,
            opener: opener.into(),
        })
    }

    fn channel(
        &self,
        channel: u32,
        socket: UdpSocket,
        peer: SocketAddr,
    ) -> Result<ChannelParams, SessionError> {
        let channel = self.phase * MAX_CHANNELS + channel;
        let at = ChannelRef { session_id: self.session_id, request_id: self.request_id, channel };
        let secrets = ChannelSecrets::derive(self.conn, &at)?;
        let mut config = self.negotiated.apply(self.base);
        config.initial_dsn = secrets.initial_dsn;
        config.seed = secrets.seed;
        // The QUIC handshake already measured the path: a better start than a guess.
        config.initial_rtt_us = (self.conn.rtt().as_micros() as u64).max(1);
        config.validate().map_err(|e| SessionError::Config(e.to_string()))?;
        Ok(ChannelParams {
            keys: secrets.keys(self.role, self.negotiated.aead),
            config,
            socket,
            peer,
        })
    }
}

/// Binds `count` data sockets on `ip` (this end's address on the QUIC connection), any port,
/// each with receive buffers of `buffer_bytes` and receive times on; returns them with their
/// ports, in order (what `Ready` announces).
pub(crate) fn bind_data_sockets(
    count: u32,
    ip: Option<IpAddr>,
    peer: IpAddr,
    buffer_bytes: usize,
) -> Result<(Vec<UdpSocket>, Vec<u16>), SessionError> {
    let ip = ip.unwrap_or(match peer {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    });
    (0..count)
        .map(|_| {
            let socket = UdpSocket::bind(SocketAddr::new(ip, 0))
                .map_err(|e| SessionError::io(format!("binding a data socket on {ip}"), e))?;
            // Datagrams may wait in it before its channel starts (an early start's do): they
            // must carry their receive times, and fit.
            sluice_udp::prepare_receive(&socket, buffer_bytes)
                .map_err(|e| SessionError::io("setting up a data socket", e))?;
            let port = socket
                .local_addr()
                .map_err(|e| SessionError::io("reading a data socket's address", e))?
                .port();
            Ok((socket, port))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(|bound| bound.into_iter().unzip())
}

/// A data channel running on the blocking pool. Dropping it cancels the channel, so a request
/// abandoned for any reason (an error, a closed connection, a dropped future) stops its thread.
pub(crate) struct DataTask<T> {
    /// `None` once joined.
    handle: Option<JoinHandle<T>>,
    cancel: Arc<AtomicBool>,
}

impl<T: Send + 'static> DataTask<T> {
    pub(crate) fn spawn(run: impl FnOnce(&AtomicBool) -> T + Send + 'static) -> Self {
        let cancel = Arc::new(AtomicBool::new(false));
        let flag = cancel.clone();
        // The request's span follows the data onto its thread (logs and event logs name it).
        let span = tracing::Span::current();
        let handle = tokio::task::spawn_blocking(move || span.in_scope(|| run(&flag)));
        DataTask { handle: Some(handle), cancel }
    }

    /// Asks the channel to stop; [`DataTask::join`] still has to be awaited.
    pub(crate) fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    /// Waits for the channel to end. Cancel-safe (it can sit in a `select!`); once it returned,
    /// a second call is an error rather than a panic.
    pub(crate) async fn join(&mut self) -> Result<T, SessionError> {
        let thread_error =
            |e: String| SessionError::io("the data channel thread", std::io::Error::other(e));
        let Some(handle) = self.handle.as_mut() else {
            return Err(thread_error("already joined".into()));
        };
        let result = handle.await;
        self.handle = None;
        result.map_err(|e| thread_error(e.to_string()))
    }

    /// Cancels the channel and waits for its thread to stop (at once if it was joined).
    pub(crate) async fn stop(&mut self) {
        self.cancel();
        if self.handle.is_some() {
            let _ = self.join().await;
        }
    }
}

impl<T> Drop for DataTask<T> {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

/// A receive running on the blocking pool ([`crate::datapath::receive`]), with the hashes it
/// reports as soon as every byte is there, before its channels end (they linger for the
/// sender's shutdown).
pub(crate) struct Receive {
    task: DataTask<Result<ReceivedExtents, DataError>>,
    /// `None` once heard, or once the receive ended without them.
    hashed: Option<oneshot::Receiver<Vec<blake3::Hash>>>,
}

/// The hook [`crate::datapath::receive`] calls with the hashes.
pub(crate) type OnHashed<'a> = &'a (dyn Fn(&[blake3::Hash]) + Sync);

/// What a [`Receive`] did next.
pub(crate) enum Step {
    /// Every byte is there, and these are its files' hashes; the channels still linger.
    Hashed(Vec<blake3::Hash>),
    /// The receive ended (after this, the `Receive` is spent).
    Ended(Result<Result<ReceivedExtents, DataError>, SessionError>),
}

impl Receive {
    /// Runs `receive` (a call of [`crate::datapath::receive`] with the hook and the cancel
    /// flag it is given) on the blocking pool.
    pub(crate) fn spawn(
        receive: impl FnOnce(OnHashed<'_>, &AtomicBool) -> Result<ReceivedExtents, DataError>
        + Send
        + 'static,
    ) -> Self {
        let (tx, rx) = oneshot::channel();
        let tx = std::sync::Mutex::new(Some(tx));
        let task = DataTask::spawn(move |cancel| {
            let hashed = |hashes: &[blake3::Hash]| {
                if let Some(tx) = tx.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    let _ = tx.send(hashes.to_vec());
                }
            };
            receive(&hashed, cancel)
        });
        Receive { task, hashed: Some(rx) }
    }

    /// The next step. Cancel-safe.
    pub(crate) async fn step(&mut self) -> Step {
        tokio::select! {
            done = self.task.join() => Step::Ended(done),
            hashes = reported(&mut self.hashed) => Step::Hashed(hashes),
        }
    }

    /// Waits for the channels to end and returns their report; `None` if the receive ended
    /// already or failed.
    pub(crate) async fn report(&mut self) -> Option<ChannelReport> {
        match self.task.join().await {
            Ok(Ok(received)) => Some(received.report),
            _ => None,
        }
    }

    /// Ends a receive whose data is complete (its channels linger for the sender's shutdown)
    /// at once, and returns its report; `None` if it failed.
    pub(crate) async fn end(&mut self) -> Option<ChannelReport> {
        self.task.cancel();
        self.report().await
    }

    /// Cancels the receive and waits for its thread to stop.
    pub(crate) async fn stop(&mut self) {
        self.task.stop().await;
    }
}

/// The hashes once reported; never if they were not (the receive's end says why).
async fn reported(hashed: &mut Option<oneshot::Receiver<Vec<blake3::Hash>>>) -> Vec<blake3::Hash> {
    if let Some(rx) = hashed.as_mut()
        && let Ok(hashes) = rx.await
    {
        *hashed = None;
        return hashes;
    }
    *hashed = None;
    std::future::pending().await
}

/// Runs file work on the blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, SessionError> + Send + 'static,
) -> Result<T, SessionError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| SessionError::io("file task", std::io::Error::other(e.to_string())))?
}

/// What a failed data channel means to the user. A cancelled channel takes the connection's
/// close reason, if it closed.
pub(crate) fn data_error(err: DataError, conn: &quinn::Connection) -> SessionError {
    if let Some(reason) = conn.close_reason() {
        return connection_error(&reason);
    }
    match err {
        DataError::File(e) => SessionError::io("data channel file I/O", e),
        DataError::Hash(e) => SessionError::io("hashing the received file", e),
        DataError::Config(e) => SessionError::Config(e.to_string()),
        e @ DataError::PacketTooLarge { .. } => SessionError::Config(e.to_string()),
        other => SessionError::Network(format!("data channel: {other}")),
    }
}

/// What a failed control read or write means to the user.
pub(crate) fn frame_error(err: FrameError, conn: &quinn::Connection) -> SessionError {
    if let Some(reason) = conn.close_reason() {
        return connection_error(&reason);
    }
    match err {
        FrameError::Io(e) => SessionError::Network(format!("control stream: {e}")),
        FrameError::Timeout(d) => {
            SessionError::Network(format!("the peer did not answer within {} s", d.as_secs()))
        }
        other => SessionError::Protocol(other.to_string()),
    }
}

/// How the sender may change the count of streams carrying data: a count the user fixed stays;
/// else more while they help, and fewer on a shared path, except for a fixed rate (not a share
/// of anything) and the scavenger (one stream: the least TCP can take).
fn growth(negotiated: &Negotiated) -> Growth {
    match (negotiated.grow_streams, negotiated.cc) {
        (false, _) => Growth::Fixed,
        (true, CcKind::Low) => Growth::Single,
        (true, CcKind::Fixed) => Growth::Adaptive { fair: false },
        (true, _) => Growth::Adaptive { fair: true },
    }
}
