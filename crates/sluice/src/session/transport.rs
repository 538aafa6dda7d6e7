//! Which transport a session runs on, and the client's choice of it: QUIC on UDP (data on UDP
//! channels), or the same QUIC tunnelled over TCP ([`super::tunnel`], data on TCP streams), or
//! `auto`, which races the two handshakes with UDP preferred (Happy Eyeballs, RFC 8305, with
//! QUIC in IPv6's place).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::time::{Duration, Instant};

use std::future::Future;

use tracing::{debug, info};

use super::tunnel;
use super::{SessionError, sleep_until};

/// The transport a client asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransportChoice {
    /// UDP when it gets through, else TCP.
    #[default]
    Auto,
    /// QUIC on UDP, data on UDP channels.
    Udp,
    /// QUIC tunnelled over TCP, data on parallel TCP streams.
    Tcp,
}

impl FromStr for TransportChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(TransportChoice::Auto),
            "udp" => Ok(TransportChoice::Udp),
            "tcp" => Ok(TransportChoice::Tcp),
            other => Err(format!("unknown transport {other:?}: auto, udp or tcp")),
        }
    }
}

/// The transport a session runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// QUIC on UDP, data on UDP channels.
    #[default]
    Udp,
    /// QUIC over TCP, data on TCP streams.
    Tcp,
}

impl Transport {
    /// `udp` or `tcp`.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// TCP data streams carrying data at the start of a transfer unless the user fixed the count
/// (`--channels`): FSP's rule of thumb. The sender adds more, up to [`TCP_STREAMS_MAX`], while
/// they help, and halves them on a shared path (`datapath::tcp`'s growth). Each stream's
/// congestion control is the kernel's, so N streams take about N fair shares of a shared
/// bottleneck.
pub const TCP_STREAMS: u32 = 4;

/// TCP data streams per transfer at most unless the user or the server's `max_channels` says:
/// all are opened at the start, and those not carrying data idle.
pub const TCP_STREAMS_MAX: u32 = 16;

/// How long UDP's handshake runs alone before TCP's starts too.
const TCP_HEAD_START: Duration = Duration::from_millis(250);

/// When TCP's handshake finished first, how much longer UDP's may still win: at least this, and
/// at least [`UDP_GRACE_RTTS`] round trips (as the tunnelled session measured them). By then a
/// path that carries UDP has had its one round trip of QUIC handshake several times over (TCP
/// started later and needed two: its own and QUIC's inside it); only a lost first flight is
/// still on its way.
const UDP_GRACE: Duration = Duration::from_millis(200);
const UDP_GRACE_RTTS: u32 = 2;

/// Once TCP's attempt failed, how much longer UDP's may take. A host that refuses the TCP
/// connection (nothing listens: the server is down, or runs with `--tcp off`) and does not
/// answer UDP by then is given up, not waited for until QUIC's handshake times out.
const UDP_ALONE: Duration = Duration::from_secs(1);

/// How long the TCP connection of a tunnelled session may take.
const TCP_CONNECT_WAIT: Duration = Duration::from_secs(10);

/// A connected session: its endpoint (which carries it), the connection and its transport.
pub(crate) struct Connected {
    pub(crate) endpoint: quinn::Endpoint,
    pub(crate) conn: quinn::Connection,
    pub(crate) transport: Transport,
    /// Why `auto` chose TCP, to tell the user once.
    pub(crate) notice: Option<String>,
}

/// An endpoint on `transport` toward `server`: a UDP socket, or a TCP connection to the
/// server's TCP port.
pub(crate) async fn endpoint(
    transport: Transport,
    server: SocketAddr,
) -> Result<quinn::Endpoint, SessionError> {
    match transport {
        Transport::Udp => {
            let bind = match server.ip() {
                IpAddr::V4(_) => SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0),
                IpAddr::V6(_) => SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), 0),
            };
            super::first_flight::client_endpoint(bind)
                .map_err(|e| SessionError::io(format!("binding a UDP socket on {bind}"), e))
        }
        Transport::Tcp => {
            let socket = tunnel::dial(server, TCP_CONNECT_WAIT).await.map_err(|e| {
                SessionError::Network(format!("could not connect to {server} over TCP: {e}"))
            })?;
            tunnel::endpoint(socket, None)
                .map_err(|e| SessionError::io("starting a QUIC endpoint over TCP", e))
        }
    }
}

/// Connects on `choice`'s transport, `connect` running the QUIC handshake on an endpoint. For
/// `auto`, UDP starts at once and TCP after [`TCP_HEAD_START`] (or at once when UDP failed);
/// the first to finish wins, but a TCP win waits for UDP a little longer ([`UDP_GRACE`]), and
/// a TCP failure leaves UDP [`UDP_ALONE`] more. A refusal that is not the path's (a changed
/// fingerprint, a busy server) ends the race.
pub(crate) async fn connect<F, Fut>(
    choice: TransportChoice,
    server: SocketAddr,
    connect: F,
) -> Result<Connected, SessionError>
where
    F: Fn(quinn::Endpoint, Transport) -> Fut,
    Fut: Future<Output = Result<(quinn::Endpoint, quinn::Connection), SessionError>>,
{
    let attempt = |transport: Transport| {
        let connect = &connect;
        async move {
            let endpoint = endpoint(transport, server).await?;
            let (endpoint, conn) = connect(endpoint, transport).await?;
            Ok::<_, SessionError>(Connected { endpoint, conn, transport, notice: None })
        }
    };
    match choice {
        TransportChoice::Udp => return attempt(Transport::Udp).await,
        TransportChoice::Tcp => return attempt(Transport::Tcp).await,
        TransportChoice::Auto => {}
    }
    let started = Instant::now();
    let udp = attempt(Transport::Udp);
    let tcp = async {
        tokio::time::sleep(TCP_HEAD_START).await;
        attempt(Transport::Tcp).await
    };
    let (mut udp, mut tcp) = (std::pin::pin!(udp), std::pin::pin!(tcp));
    let (mut udp_failed, mut tcp_failed) = (None, None);
    // The TCP session, when it was up first, and when.
    let mut tcp_won: Option<(Connected, Instant)> = None;
    // When TCP's attempt failed, the end of UDP's wait.
    let mut udp_alone: Option<Instant> = None;
    loop {
        let grace =
            tcp_won.as_ref().map(|(won, at)| *at + UDP_GRACE.max(won.conn.rtt() * UDP_GRACE_RTTS));
        tokio::select! {
            done = &mut udp, if udp_failed.is_none() => match done {
                Ok(connected) => return Ok(connected),
                Err(err) if !path_failure(&err) => return Err(err),
                Err(err) => {
                    debug!(error = %err, "the UDP handshake failed");
                    if let Some((won, _)) = tcp_won.take() {
                        return Ok(taken_tcp(won, &err));
                    }
                    if let Some(tcp_err) = tcp_failed.take() {
                        return Err(both_failed(server, err, tcp_err));
                    }
                    udp_failed = Some(err);
                }
            },
            done = &mut tcp, if tcp_won.is_none() && tcp_failed.is_none() => match done {
                Ok(connected) => match udp_failed.take() {
                    Some(udp_err) => return Ok(taken_tcp(connected, &udp_err)),
                    None => tcp_won = Some((connected, Instant::now())),
                },
                Err(err) if !path_failure(&err) => return Err(err),
                Err(err) => {
                    debug!(error = %err, "the TCP handshake failed");
                    if let Some(udp_err) = udp_failed.take() {
                        return Err(both_failed(server, udp_err, err));
                    }
                    udp_alone = Some(Instant::now() + UDP_ALONE);
                    tcp_failed = Some(err);
                }
            },
            () = sleep_until(udp_alone) => {
                let udp_err = SessionError::Network(format!(
                    "no QUIC handshake within {:.1} s",
                    started.elapsed().as_secs_f64()
                ));
                let tcp_err = tcp_failed.take().expect("UDP waits alone only once TCP failed");
                return Err(both_failed(server, udp_err, tcp_err));
            }
            () = sleep_until(grace) => {
                let (won, _) = tcp_won.take().expect("a grace only with a TCP session");
                let why = SessionError::Network(format!(
                    "no QUIC handshake over UDP within {:.1} s",
                    started.elapsed().as_secs_f64()
                ));
                return Ok(taken_tcp(won, &why));
            }
        }
    }
}

/// Whether a failed connection attempt is the path's (the other transport may get through),
/// not a refusal by a server that was reached.
fn path_failure(err: &SessionError) -> bool {
    matches!(err, SessionError::Network(_) | SessionError::Io { .. })
}

/// The TCP session, with its notice: UDP did not get through.
fn taken_tcp(mut connected: Connected, udp: &SessionError) -> Connected {
    info!(why = %udp.detail(), "the session goes over TCP");
    connected.notice = Some(format!(
        "UDP to the server does not get through ({}): the session and its data go over TCP \
         streams, slower than UDP on long lossy paths (--transport udp|tcp chooses)",
        udp.detail()
    ));
    connected
}

fn both_failed(server: SocketAddr, udp: SessionError, tcp: SessionError) -> SessionError {
    SessionError::Network(format!(
        "could not reach {server} over UDP ({}) or TCP ({})",
        udp.detail(),
        tcp.detail()
    ))
}
