//! A server's TCP port, for clients whose path blocks UDP: it takes tunnelled sessions
//! ([`super::tunnel`]) and transfers' data streams ([`super::streams`]), told apart by their
//! preface.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::debug;

use super::SessionError;
use super::streams::{Door, HELLO_BYTES};
use super::tunnel::{Preface, TcpDatagrams};

/// How long a new connection has to say what it is.
const PREFACE_WAIT: Duration = Duration::from_secs(10);

/// Connections that have not yet said what they are, at once; beyond them new ones wait in
/// the listener's backlog.
const MAX_UNSORTED: usize = 256;

/// Tunnelled sessions at once (each one TCP connection); beyond them a new one is closed. The
/// server's limits of sessions (in all and per address) then apply inside, as over UDP.
const MAX_TUNNELS: usize = 1024;

/// The server's TCP side: the listener, the socket its sessions' QUIC runs on, and the door
/// of data streams.
#[derive(Debug)]
pub(crate) struct TcpPort {
    pub(crate) listener: TcpListener,
    pub(crate) datagrams: Arc<TcpDatagrams>,
    pub(crate) door: Arc<Door>,
}

impl TcpPort {
    /// Listens on `addr` (the QUIC endpoint's IP and port).
    pub(crate) fn bind(addr: SocketAddr) -> io::Result<TcpPort> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let local = listener.local_addr()?;
        Ok(TcpPort { listener, datagrams: TcpDatagrams::new(local), door: Arc::default() })
    }

    /// Accepts connections and sorts them until the task is dropped.
    pub(crate) async fn serve(
        listener: TcpListener,
        datagrams: Arc<TcpDatagrams>,
        door: Arc<Door>,
    ) {
        let unsorted = Arc::new(Semaphore::new(MAX_UNSORTED));
        loop {
            let Ok(place) = unsorted.clone().acquire_owned().await else { return };
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    debug!(error = %e, "accepting a TCP connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let (datagrams, door) = (datagrams.clone(), door.clone());
            tokio::spawn(async move {
                let sorted = tokio::time::timeout(PREFACE_WAIT, sort(stream, &datagrams, &door));
                match sorted.await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => debug!(%peer, error = %e, "a TCP connection closed"),
                    Err(_) => debug!(%peer, "a TCP connection said nothing in time"),
                }
                drop(place);
            });
        }
    }
}

/// Reads a connection's preface and hands it on: to the sessions' socket, or (with its hello)
/// to the door.
async fn sort(mut stream: TcpStream, datagrams: &TcpDatagrams, door: &Door) -> io::Result<()> {
    let mut preface = [0u8; 8];
    stream.read_exact(&mut preface).await?;
    match Preface::parse(&preface) {
        Some(Preface::Session) if datagrams.connections() >= MAX_TUNNELS => {
            Err(io::Error::other(format!("{MAX_TUNNELS} tunnelled sessions are open: closed")))
        }
        Some(Preface::Session) => datagrams.attach(stream),
        Some(Preface::Data) => {
            let mut hello = [0u8; HELLO_BYTES];
            stream.read_exact(&mut hello).await?;
            let stream = stream.into_std()?;
            stream.set_nonblocking(false)?;
            door.arrive(&hello, stream);
            Ok(())
        }
        None => Err(io::Error::new(io::ErrorKind::InvalidData, "not a Sluice preface")),
    }
}

/// Binds the QUIC endpoint's UDP socket on `listen` and, with `tcp`, a TCP listener on the
/// same IP and port. With port 0 the pair is bound anew (up to 20 times) until the TCP port of
/// the UDP port the system chose is free too.
pub(crate) fn bind_ports(
    listen: SocketAddr,
    tcp: bool,
) -> Result<(quinn::Endpoint, Option<TcpPort>), SessionError> {
    let mut attempts = 0;
    loop {
        attempts += 1;
        let socket = std::net::UdpSocket::bind(listen)
            .map_err(|e| SessionError::io(format!("binding {listen}"), e))?;
        let bound = socket.local_addr().map_err(|e| SessionError::io("reading the address", e))?;
        let endpoint = quinn::Endpoint::new(
            quinn::EndpointConfig::default(),
            None,
            socket,
            Arc::new(quinn::TokioRuntime),
        )
        .map_err(|e| SessionError::io(format!("binding {listen}"), e))?;
        if !tcp {
            return Ok((endpoint, None));
        }
        match TcpPort::bind(bound) {
            Ok(port) => return Ok((endpoint, Some(port))),
            Err(_) if listen.port() == 0 && attempts < 20 => {}
            Err(e) => {
                return Err(SessionError::io(
                    format!(
                        "listening on TCP {bound} (for clients whose path blocks UDP; `tcp = false` turns it off)"
                    ),
                    e,
                ));
            }
        }
    }
}
