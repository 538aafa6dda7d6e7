//! The serving end: accepts QUIC connections, authenticates each session by its token, and
//! serves `Stat`, `Get` and `Put` requests for files under one root directory.
//!
//! Every connection is a Tokio task and every request stream another; data channels run on the
//! blocking pool (`spawn_blocking`), each with its own UDP socket on the server's address. The
//! bounds: [`MAX_CONNECTIONS`] sessions ([`MAX_UNAUTHENTICATED`] of them, and
//! [`MAX_UNAUTHENTICATED_PER_IP`] from one address, before their token is accepted),
//! [`MAX_REQUESTS_PER_SESSION`] concurrent requests and [`MAX_TRANSFERS_PER_SESSION`] transfers
//! per session (beyond them a request is answered `busy`), and [`MAX_TRANSFERS`] transfers in
//! the whole server (beyond them a transfer waits, up to [`TRANSFER_WAIT`], then is answered
//! `busy`).
//!
//! A connection beyond its address's places first proves its address with a QUIC Retry, then
//! waits for a place, first come first served ([`MAX_WAITING_PER_IP`] of them, at most
//! [`PLACE_WAIT`] each): a burst of clients from one host (a parallel script) is set up a few at
//! a time instead of being turned away. Connections are turned away (refused: the client reports
//! the server busy and tries again later) only past the bounds that keep memory bounded, or when
//! the address's places have all been held for [`PLACE_WAIT`] without one given back (they
//! stalled: connections that never authenticate, which only the handshake deadline frees).

mod relay;
mod relayed_get;

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_proto::config::ChannelConfig;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::{Instrument, debug, info, info_span, warn};

use super::access::resolve;
use super::access::{Access, Gate, server_place, token_place};
use super::channel::{
    ChannelSetup, HANDSHAKE_TIMEOUT, Negotiated, REPLY_TIMEOUT, blocking, control_transport,
    default_channel_config, frame_error,
};
use super::copy::check_level;
use super::drive::{Channels, Destination, Wire, run_receiving, run_sending, unrooted};
use super::early::{EARLY_REQUEST, EarlySockets, send_offer};
use super::identity::{Fingerprint, Identity, peer_fingerprint};
use super::job_log::Ended;
use super::jobs::{JobRecord, Jobs};
use super::keys::{Role, SessionId};
use super::manifest_io::send_listing;
use super::messages::{
    Answer, ErrorCode, GrantClaim, JobInfo, JobPhase, PullJob, Request, failed_frame, read_message,
    write_message,
};
use super::metrics::Metrics;
pub(crate) use super::path_memory::PathMemory;
use super::relay::collect::Collections;
use super::relay::spool::{Spool, SpoolConfig, TransferId};
use super::streams::{Door, Opener};
use super::tcp_port::{TcpPort, bind_ports};
use super::third_party::{Grants, ThirdPartyConfig};
use super::tokens::{Rights, TokenSet};
use super::transport::TCP_STREAMS_MAX;
use super::tunnel;
use super::{
    MAX_CHANNELS, PROTOCOL_VERSION, SessionError, auto_channels, close_code, connection_error,
};
use crate::datapath::{ChannelReport, Fault};
use crate::tree::{ReceiveOptions, WalkOptions};
use sluice_session::handshake::{
    AdmissionCounts, AdmissionLimits, AdmitDecision, HandshakeEffect, ServerHandshake,
    TokenVerdict, admit,
};
use sluice_session::{Receiving, Sending, Timeouts};

/// Sessions served at once; further connection attempts are refused.
pub const MAX_CONNECTIONS: usize = 256;
/// Connections not yet authenticated (QUIC handshake or `Hello` pending), in all.
pub const MAX_UNAUTHENTICATED: usize = 64;
/// Connections not yet authenticated from one IP address at once; more from it wait for a place.
///
/// Not a defence against spoofed addresses (a place beyond [`RETRY_ABOVE`], and any wait, is
/// only for an address that answered a Retry) but against one host's taking all
/// [`MAX_UNAUTHENTICATED`] places: each holds a connection's state for up to two handshake
/// deadlines when its client never authenticates.
pub const MAX_UNAUTHENTICATED_PER_IP: usize = 8;
/// Connections from one address that may wait for one of its places (each costs its first
/// datagrams, at most [`INCOMING_BUFFER`] bytes: no connection state exists while it waits).
pub const MAX_WAITING_PER_IP: usize = 64;
/// Connections that may wait for a place, from all addresses.
pub const MAX_WAITING: usize = 128;
/// How long a connection waits for a place before it is refused. A client that is being set up
/// gives its place back within a few round trips of the handshake; an address none of whose
/// places came back for this long has stalled, and its newcomers are refused at once.
pub const PLACE_WAIT: Duration = Duration::from_secs(2);
/// Bytes of datagrams quinn keeps for one connection attempt that is not yet accepted (one that
/// waits for a place): its client's first flight and retransmissions, a few KiB.
const INCOMING_BUFFER: u64 = 64 << 10;
/// Beyond this many unauthenticated connections, a new peer must first prove its address with
/// a QUIC Retry (stateless: a spoofed source cannot take a place).
const RETRY_ABOVE: usize = 16;
/// The bounds [`admit`] keeps on connections not yet authenticated.
const ADMISSION: AdmissionLimits = AdmissionLimits {
    per_address: MAX_UNAUTHENTICATED_PER_IP,
    all: MAX_UNAUTHENTICATED,
    retry_above: RETRY_ABOVE,
    waiting_per_address: MAX_WAITING_PER_IP,
    waiting_all: MAX_WAITING,
    place_wait: PLACE_WAIT,
};
/// Requests one session may have in flight (the QUIC stream limit).
pub const MAX_REQUESTS_PER_SESSION: u32 = 16;
/// Transfers one session may run at once (each may hold a manifest in memory); further ones
/// are answered `busy`.
pub const MAX_TRANSFERS_PER_SESSION: usize = 4;
/// Transfers the whole server runs at once; further ones wait for a place, up to
/// [`TRANSFER_WAIT`], then are answered `busy`.
pub const MAX_TRANSFERS: usize = 32;
/// How long a transfer waits for a place among the server's [`MAX_TRANSFERS`]: at most half the
/// client's wait for the answer ([`REPLY_TIMEOUT`]), so that the request's own work (listing a
/// tree to send, planning one received) still fits in it, and a `busy` answer reaches it.
pub const TRANSFER_WAIT: Duration = Duration::from_secs(15);
const _: () = assert!(TRANSFER_WAIT.as_secs() * 2 <= REPLY_TIMEOUT.as_secs());
/// How long a cancellation waits for its job to end before it answers.
const CANCEL_WAIT: Duration = Duration::from_secs(10);
/// The shortest time between two reports of a job to its client.
const JOB_REPORT_EVERY: Duration = Duration::from_millis(250);
/// The longest time between two reports of a job to its client.
const JOB_REPORT_IDLE: Duration = Duration::from_secs(5);
/// How long a refused client gets to read the refusal before the server closes the connection.
const REFUSAL_GRACE: Duration = Duration::from_secs(1);
/// How long a shutdown waits for sessions to wind down.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Settings of a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The directory served: every request path is resolved inside it.
    pub root: PathBuf,
    /// The UDP address of the QUIC endpoint (data sockets use the same IP, port 0).
    pub listen: SocketAddr,
    /// Who the server is and whom it admits.
    pub credentials: Credentials,
    /// A session silent for this long is closed (QUIC idle timeout; the effective value is the
    /// smaller of this and the client's).
    pub idle_timeout: Duration,
    /// The most data channels a transfer may use (a client offering more gets this many);
    /// `None` is one per core ([`auto_channels`]).
    pub max_channels: Option<u32>,
    /// How long an upload waits for the client's `Digest` after its last byte arrived; `None`
    /// allows for a slow disk at the client: 30 s plus 1 s per 50 MB.
    pub digest_timeout: Option<Duration>,
    /// For tests of repair: a fault in this end's data path ([`Fault`]).
    #[doc(hidden)]
    pub fault: Option<Fault>,
    /// Which ends of third-party transfers it takes, and whom it dials.
    pub third_party: ThirdPartyConfig,
    /// Whether it also listens on TCP, on the QUIC endpoint's IP and port, for clients whose
    /// path blocks UDP: their sessions come tunnelled and their data on TCP streams.
    pub tcp: bool,
    /// A relay's spool: when set, the server keeps sealed blocks for collectors
    /// (`docs/relay.md`).
    pub spool: Option<SpoolConfig>,
    /// Whether downloads keep what each path delivered, in the state directory, to start the
    /// next near it ([`crate::session::path_memory`]; a one-shot server keeps none).
    pub path_memory: bool,
    /// The relays it stripes relayed downloads over, when a client names them
    /// (`docs/relay.md`, "Downloads").
    pub relays: Vec<super::ServerRelay>,
}

/// Who a server is and whom it admits.
#[derive(Debug, Clone)]
pub enum Credentials {
    /// A daemon's: the identity kept in `state_dir` (made, mode 0700, on first start) and the
    /// tokens of `tokens_file` (which must not be readable by group or others).
    Stored {
        /// Where the identity lives.
        state_dir: PathBuf,
        /// The file of accepted tokens.
        tokens_file: PathBuf,
    },
    /// A one-shot server's (`sluice cp --ssh` starts one): a new identity that lives only in
    /// memory, and one token that admits one session. The server stops when that session ends,
    /// or when none began within `wait`; a second client is refused even with the token.
    OneTime {
        /// The token.
        token: String,
        /// How long the server waits for its client.
        wait: Duration,
    },
}

impl Credentials {
    fn load(&self) -> Result<(Identity, TokenSet, Grants), SessionError> {
        match self {
            Credentials::Stored { state_dir, tokens_file } => Ok((
                Identity::load_or_create(state_dir)?,
                TokenSet::load(tokens_file)?,
                Grants::load_or_create(state_dir)?,
            )),
            Credentials::OneTime { token, .. } => {
                Ok((Identity::ephemeral()?, TokenSet::single(token), Grants::ephemeral()?))
            }
        }
    }

    /// Where the server keeps its state, when it keeps any.
    fn state_dir(&self) -> Option<&Path> {
        match self {
            Credentials::Stored { state_dir, .. } => Some(state_dir),
            Credentials::OneTime { .. } => None,
        }
    }
}

/// The file of path memory in a server's state directory.
const PATH_MEMORY_FILE: &str = "paths.json";

/// What every session task needs.
struct Shared {
    root: PathBuf,
    tokens: TokenSet,
    /// What each token may do, in the order of `tokens`.
    access: Vec<Arc<Access>>,
    transfers: Arc<Semaphore>,
    /// Local settings of the server's data channels.
    channel: ChannelConfig,
    /// The most data channels per transfer.
    max_channels: u32,
    /// The most TCP data streams per transfer of a session over TCP: `max_channels` when the
    /// operator set it, else [`TCP_STREAMS_MAX`] (the kernel does a stream's work, not a
    /// thread per core; the sender keeps those that do not help idle).
    max_streams: u32,
    /// See [`ServerConfig::digest_timeout`].
    digest_timeout: Option<Duration>,
    /// See [`ServerConfig::fault`].
    fault: Option<Fault>,
    /// What the server has done, for `--metrics`.
    metrics: Arc<Metrics>,
    /// A one-shot server's wait for its session ([`Credentials::OneTime`]).
    one_session: Option<Duration>,
    /// Whether a one-shot server's session has begun.
    claimed: std::sync::atomic::AtomicBool,
    /// Unauthenticated connections, and those waiting to be, by source address.
    unauthenticated: std::sync::Mutex<std::collections::HashMap<IpAddr, Pending>>,
    /// Whether new connections are offered sockets for an early upload: not when a token
    /// limits its rate (the client would choose its channels' rate before the server knows
    /// its token).
    early_offers: bool,
    /// Sockets bound for early uploads of connections not yet authenticated
    /// ([`super::early::EARLY_SOCKETS`] at most).
    early_sockets: Arc<std::sync::atomic::AtomicUsize>,
    /// Which ends of third-party transfers the server takes, and whom it dials.
    third_party: ThirdPartyConfig,
    /// As a source: the key of its grants, and the jobs that ended.
    grants: Grants,
    /// As a destination: its jobs.
    jobs: Arc<Jobs>,
    /// Where the TCP data streams of sessions over TCP come in.
    door: Arc<Door>,
    /// A relay's spool.
    spool: Option<Arc<Spool>>,
    /// Relayed uploads being collected here.
    collections: Arc<Collections>,
    /// What paths delivered to downloads ([`ServerConfig::path_memory`]).
    memory: Option<Arc<PathMemory>>,
    /// See [`ServerConfig::relays`].
    relays: Vec<super::ServerRelay>,
    /// Relayed downloads whose clients take a direct share.
    takes: Arc<super::relay::take::Takes>,
}

/// A bound server; [`Server::run`] serves it.
#[derive(Debug)]
pub struct Server {
    endpoint: quinn::Endpoint,
    /// The TCP side ([`ServerConfig::tcp`]): the endpoint of tunnelled sessions and the port.
    tcp: Option<(quinn::Endpoint, TcpPort)>,
    shared: Arc<Shared>,
    fingerprint: Fingerprint,
    local_addr: SocketAddr,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("root", &self.root).finish_non_exhaustive()
    }
}

impl Server {
    /// Loads or makes the identity, reads the tokens and binds the QUIC endpoint. Must be called
    /// inside a Tokio runtime.
    pub fn bind(config: ServerConfig) -> Result<Server, SessionError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(SessionError::Config("Server::bind needs a Tokio runtime".into()));
        }
        let root = std::fs::canonicalize(&config.root).map_err(|e| {
            SessionError::io(format!("the served directory {}", config.root.display()), e)
        })?;
        if !root.is_dir() {
            return Err(SessionError::Config(format!("{} is not a directory", root.display())));
        }
        if let Some(n) = config.max_channels.filter(|n| !(1..=MAX_CHANNELS).contains(n)) {
            return Err(SessionError::Config(format!(
                "max_channels {n}: between 1 and {MAX_CHANNELS} are possible"
            )));
        }
        let (identity, tokens, grants) = config.credentials.load()?;
        let one_session = match config.credentials {
            Credentials::OneTime { wait, .. } => Some(wait),
            Credentials::Stored { .. } => None,
        };

        let early_offers = tokens.grants().iter().all(|grant| grant.rate_bps.is_none());
        let mut transport = control_transport();
        let idle = quinn::IdleTimeout::try_from(config.idle_timeout)
            .map_err(|_| SessionError::Config("idle_timeout is too large".into()))?;
        transport
            .max_idle_timeout(Some(idle))
            .max_concurrent_bidi_streams(MAX_REQUESTS_PER_SESSION.into())
            .max_concurrent_uni_streams(0u32.into());
        let mut server_config = quinn::ServerConfig::with_crypto(Arc::new(identity.server_tls()?));
        server_config
            .transport_config(Arc::new(transport))
            .incoming_buffer_size(INCOMING_BUFFER)
            .incoming_buffer_size_total(
                INCOMING_BUFFER * (MAX_WAITING + MAX_UNAUTHENTICATED) as u64,
            );

        let (endpoint, tcp) = bind_ports(config.listen, config.tcp)?;
        let tcp = match tcp {
            Some(port) => {
                let endpoint =
                    tunnel::endpoint(port.datagrams.clone(), Some(server_config.clone()))
                        .map_err(|e| SessionError::io("starting the TCP endpoint", e))?;
                Some((endpoint, port))
            }
            None => None,
        };
        endpoint.set_server_config(Some(server_config));
        let local_addr = endpoint
            .local_addr()
            .map_err(|e| SessionError::io("reading the endpoint's address", e))?;
        let Gate { tokens, access, transfers, metrics } = Gate::new(&root, tokens)?;
        info!(%local_addr, fingerprint = %identity.fingerprint(), root = %root.display(), tokens = tokens.len(), "server bound");
        let fingerprint = identity.fingerprint().clone();
        let channel = default_channel_config();
        let state_dir = config.credentials.state_dir();
        // Ended jobs are kept in the state directory, each named by its token's digest.
        let ended = |file: &str| {
            state_dir
                .map_or_else(Ended::default, |d| Ended::kept_in(d.join(file), tokens.digests()))
        };
        let jobs = Jobs::new(
            state_dir,
            Arc::new(identity),
            channel.clone(),
            transfers.clone(),
            ended(super::jobs::ENDED_FILE),
        );
        let collections = Arc::new(Collections::new(
            ended(super::relay::collect::ENDED_FILE),
            state_dir.map(|d| d.join(super::relay::collect_record::COLLECTIONS_DIR)),
        ));
        let door = tcp.as_ref().map(|(_, port)| port.door.clone()).unwrap_or_default();
        let spool = config.spool.as_ref().map(Spool::open).transpose()?;
        let memory = state_dir
            .filter(|_| config.path_memory)
            .map(|dir| Arc::new(PathMemory::at(dir.join(PATH_MEMORY_FILE))));
        Ok(Server {
            endpoint,
            tcp,
            shared: Arc::new(Shared {
                door,
                root,
                tokens,
                access,
                transfers,
                channel,
                max_channels: config.max_channels.unwrap_or_else(auto_channels),
                max_streams: config.max_channels.unwrap_or(TCP_STREAMS_MAX),
                digest_timeout: config.digest_timeout,
                fault: config.fault,
                metrics,
                one_session,
                claimed: false.into(),
                unauthenticated: Default::default(),
                early_offers,
                early_sockets: Arc::default(),
                third_party: config.third_party,
                grants,
                jobs: Arc::new(jobs),
                spool,
                collections,
                memory,
                relays: config.relays,
                takes: Arc::default(),
            }),
            fingerprint,
            local_addr,
        })
    }

    /// The server's counters (live: they keep counting while it runs).
    pub fn metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }

    /// The server's own token check and what each token may do, for another front end of the
    /// same files (the web app): it admits exactly the tokens this server does, and its
    /// transfers take the same places and count in the same metrics ([`Gate::transfer`]).
    pub fn gate(&self) -> Gate {
        Gate {
            tokens: self.shared.tokens.clone(),
            access: self.shared.access.clone(),
            transfers: self.shared.transfers.clone(),
            metrics: self.shared.metrics.clone(),
        }
    }

    /// What paths delivered to this server's downloads, when it keeps path memory
    /// ([`ServerConfig::path_memory`]): another front end's downloads (the web app's) start from
    /// it and add to it.
    pub fn path_memory(&self) -> Option<Arc<PathMemory>> {
        self.shared.memory.clone()
    }

    /// The fingerprint clients pin.
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    /// The address the endpoint is bound to (the actual port when `listen` had port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves sessions until `shutdown` completes, then closes every connection (their data
    /// channels are cancelled) and waits briefly for them to wind down. A one-shot server
    /// ([`Credentials::OneTime`]) also stops when its session ends, and fails when none began
    /// in time.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), SessionError> {
        self.serve(Box::pin(shutdown)).await
    }

    /// [`Server::run`] with the shutdown behind a pointer: the server's loop is then compiled
    /// once here, not once for each shutdown future a caller passes.
    async fn serve(
        mut self,
        mut shutdown: Pin<Box<dyn Future<Output = ()> + Send + '_>>,
    ) -> Result<(), SessionError> {
        // Jobs a previous run left unfinished, whose clients' tokens still may write.
        let shared = self.shared.clone();
        let find = |digest: &[u8; 32]| shared.tokens.digests().iter().position(|d| d == digest);
        self.shared.jobs.resume_saved(|digest, index| {
            let token = match digest {
                Some(digest) => find(&digest)?,
                None => index,
            };
            let access = shared.access.get(token).filter(|a| a.rights.write)?;
            Some((token, access.root.clone(), access.transfers.as_ref().map(|(_, s)| s.clone())))
        });
        // Relayed uploads' collections it left running or stalled, the same way.
        self.shared.collections.resume_saved(
            |digest| {
                let token = find(digest)?;
                let access = shared.access.get(token).filter(|a| a.rights.write)?;
                Some((token, access.root.clone()))
            },
            &self.shared.jobs.identity(),
        );
        let wait = self.shared.one_session;
        let deadline = tokio::time::sleep(wait.unwrap_or(Duration::MAX / 4));
        let mut deadline = std::pin::pin!(deadline);
        let mut sessions = JoinSet::new();
        let mut result = Ok(());
        let (tcp_endpoint, _tcp_port) = match self.tcp.take() {
            Some((endpoint, TcpPort { listener, datagrams, door })) => {
                let serving = tokio::spawn(TcpPort::serve(listener, datagrams, door));
                (Some(endpoint), Some(AbortOnDrop(serving)))
            }
            None => (None, None),
        };
        let tcp_endpoint = tcp_endpoint.as_ref();
        let _expiring =
            self.shared.spool.clone().map(|spool| AbortOnDrop(tokio::spawn(spool.expire_every())));
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                () = &mut deadline, if wait.is_some() && !self.shared.claimed() => {
                    result = Err(SessionError::Network(format!(
                        "no client came within {} s", wait.unwrap_or_default().as_secs()
                    )));
                    break;
                }
                incoming = self.endpoint.accept() => {
                    let Some(incoming) = incoming else { break };
                    self.admit(incoming, false, &mut sessions);
                }
                Some(incoming) = accept_some(tcp_endpoint) => {
                    self.admit(incoming, true, &mut sessions);
                }
                Some(served) = sessions.join_next(), if !sessions.is_empty() => {
                    if wait.is_some() && served.unwrap_or(false) {
                        info!("the one session has ended");
                        break;
                    }
                }
            }
        }
        info!("shutting down");
        self.endpoint.close(close_code::SHUTDOWN.into(), b"server shutting down");
        if let Some(endpoint) = tcp_endpoint {
            endpoint.close(close_code::SHUTDOWN.into(), b"server shutting down");
        }
        let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
            while sessions.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            warn!(
                left = sessions.len(),
                "sessions still busy after the shutdown grace: aborting them"
            );
            sessions.shutdown().await;
        }
        // Its jobs and collections end with it, as they would with its process.
        self.shared.jobs.stop();
        self.shared.collections.stop();
        let _ = tokio::time::timeout(Duration::from_secs(1), self.endpoint.wait_idle()).await;
        result
    }

    /// Takes a new connection (`over_tcp`: from the TCP endpoint) into `sessions`, makes it
    /// wait for a place, asks it to prove its address, or refuses it.
    fn admit(&self, incoming: quinn::Incoming, over_tcp: bool, sessions: &mut JoinSet<bool>) {
        if sessions.len() >= MAX_CONNECTIONS {
            warn!(remote = %incoming.remote_address(), "too many sessions: refusing a connection");
            self.shared.metrics.refused();
            incoming.refuse();
            return;
        }
        let ip = incoming.remote_address().ip().to_canonical();
        let span = info_span!("session", remote = %incoming.remote_address(), tcp = over_tcp);
        // A TCP connection proved its address with TCP's own handshake.
        let validated = over_tcp || incoming.remote_address_validated();
        match self.shared.admit(ip, validated) {
            Admission::Place(pending) => {
                sessions.spawn(serve_connection(incoming, pending, over_tcp).instrument(span));
            }
            Admission::Wait(waiting) => {
                sessions.spawn(wait_for_place(incoming, waiting, over_tcp).instrument(span));
            }
            Admission::Retry => {
                if let Err(e) = incoming.retry() {
                    e.into_incoming().refuse();
                }
            }
            Admission::Refuse(why) => {
                debug!(%ip, why, "refusing a connection");
                self.shared.metrics.refused();
                incoming.refuse();
            }
        }
    }
}

/// The next connection of an endpoint that may not be there (never, then).
async fn accept_some(endpoint: Option<&quinn::Endpoint>) -> Option<quinn::Incoming> {
    match endpoint {
        Some(endpoint) => endpoint.accept().await,
        None => std::future::pending().await,
    }
}

/// A task that stops when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One address's connections that are not yet authenticated, and those waiting to be.
struct Pending {
    /// Its places ([`MAX_UNAUTHENTICATED_PER_IP`]); connections wait for one here, in the order
    /// they came.
    places: Arc<Semaphore>,
    /// Connections waiting for a place.
    waiting: usize,
    /// When a place was last taken or given back.
    turnover: Instant,
}

impl Pending {
    fn new() -> Pending {
        Pending {
            places: Arc::new(Semaphore::new(MAX_UNAUTHENTICATED_PER_IP)),
            waiting: 0,
            turnover: Instant::now(),
        }
    }

    /// Places held (also one given to a waiting connection that has yet to take it).
    fn held(&self) -> usize {
        MAX_UNAUTHENTICATED_PER_IP.saturating_sub(self.places.available_permits())
    }
}

/// What becomes of a new connection.
enum Admission {
    /// Set it up.
    Place(Unauthenticated),
    /// Ask it to prove its address first (a QUIC Retry).
    Retry,
    /// Let it wait for a place.
    Wait(Waiting),
    /// Turn it away, for this reason (logged).
    Refuse(&'static str),
}

/// A place among the unauthenticated connections, given back on drop (to the connection that
/// waited longest for one from the address, if any).
struct Unauthenticated {
    shared: Arc<Shared>,
    ip: IpAddr,
    place: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Drop for Unauthenticated {
    fn drop(&mut self) {
        let mut pending = self.shared.unauthenticated.lock().unwrap_or_else(|e| e.into_inner());
        drop(self.place.take());
        if let Some(p) = pending.get_mut(&self.ip) {
            p.turnover = Instant::now();
            if p.held() == 0 && p.waiting == 0 {
                pending.remove(&self.ip);
            }
        }
    }
}

/// A connection's turn among those waiting for a place, given up on drop.
struct Waiting {
    shared: Arc<Shared>,
    ip: IpAddr,
    places: Arc<Semaphore>,
}

impl Waiting {
    /// The place that came free.
    fn into_place(self, place: tokio::sync::OwnedSemaphorePermit) -> Unauthenticated {
        let mut pending = self.shared.unauthenticated.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = pending.get_mut(&self.ip) {
            p.turnover = Instant::now();
        }
        drop(pending);
        Unauthenticated { shared: self.shared.clone(), ip: self.ip, place: Some(place) }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut pending = self.shared.unauthenticated.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = pending.get_mut(&self.ip) {
            p.waiting = p.waiting.saturating_sub(1);
            if p.held() == 0 && p.waiting == 0 {
                pending.remove(&self.ip);
            }
        }
    }
}

impl Shared {
    /// What becomes of a new connection from `ip` (`validated`: it answered a Retry), as
    /// `sluice_session::handshake::admit` decides from what the server holds now
    /// ([`ADMISSION`]).
    fn admit(self: &Arc<Self>, ip: IpAddr, validated: bool) -> Admission {
        let mut pending = self.unauthenticated.lock().unwrap_or_else(|e| e.into_inner());
        let all: usize = pending.values().map(Pending::held).sum();
        let all_waiting: usize = pending.values().map(|p| p.waiting).sum();
        let here = pending.entry(ip).or_insert_with(Pending::new);
        let counts = AdmissionCounts {
            held_all: all,
            held_here: here.held(),
            waiting_all: all_waiting,
            waiting_here: here.waiting,
            since_turnover: here.turnover.elapsed(),
        };
        let admission = match admit(&ADMISSION, &counts, validated) {
            AdmitDecision::Retry => Admission::Retry,
            AdmitDecision::Refuse(why) => Admission::Refuse(why),
            AdmitDecision::Place => match here.places.clone().try_acquire_owned() {
                Ok(place) => {
                    here.turnover = Instant::now();
                    Admission::Place(Unauthenticated {
                        shared: self.clone(),
                        ip,
                        place: Some(place),
                    })
                }
                // Not while `held` is below the places (the semaphore is never closed).
                Err(_) => Admission::Refuse("no place is free"),
            },
            AdmitDecision::Wait => {
                here.waiting += 1;
                Admission::Wait(Waiting { shared: self.clone(), ip, places: here.places.clone() })
            }
        };
        if here.held() == 0 && here.waiting == 0 {
            pending.remove(&ip);
        }
        admission
    }

    /// Whether a one-shot server's session has begun.
    fn claimed(&self) -> bool {
        self.claimed.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// A connection waiting for a place among its address's: set up when one comes free within
/// [`PLACE_WAIT`], else refused. Returns whether a session was established.
async fn wait_for_place(incoming: quinn::Incoming, waiting: Waiting, over_tcp: bool) -> bool {
    let places = waiting.places.clone();
    match tokio::time::timeout(PLACE_WAIT, places.acquire_owned()).await {
        Ok(Ok(place)) => serve_connection(incoming, waiting.into_place(place), over_tcp).await,
        _ => {
            debug!("no place came free in time: refusing the connection");
            waiting.shared.metrics.refused();
            drop(waiting);
            incoming.refuse();
            false
        }
    }
}

/// One session: handshake, then requests until the connection ends. Returns whether a session
/// was established. `pending` holds the connection's place among the unauthenticated ones
/// until its token is accepted; its `Hello` must come within [`HANDSHAKE_TIMEOUT`] of its
/// acceptance, the QUIC handshake included.
async fn serve_connection(
    incoming: quinn::Incoming,
    pending: Unauthenticated,
    over_tcp: bool,
) -> bool {
    let shared = pending.shared.clone();
    let connecting = match incoming.accept() {
        Ok(connecting) => connecting,
        Err(e) => {
            debug!(error = %e, "handshake failed");
            return false;
        }
    };
    // The connection before the QUIC handshake completes, so that the offer goes out with
    // the server's first flight (0.5-RTT data; a server's conversion always succeeds). The
    // handshake's deadline is then the one on `Hello`.
    let (conn, handshaken) = match connecting.into_0rtt() {
        Ok((conn, handshaken)) => (conn, Some(handshaken)),
        Err(connecting) => match tokio::time::timeout(HANDSHAKE_TIMEOUT, connecting).await {
            Ok(Ok(conn)) => (conn, None),
            Ok(Err(e)) => {
                debug!(error = %e, "handshake failed");
                return false;
            }
            Err(_) => {
                debug!("no QUIC handshake within the deadline");
                return false;
            }
        },
    };
    let id = match SessionId::random() {
        Ok(id) => id,
        Err(e) => {
            warn!(error = %e, "no session id");
            conn.close(close_code::PROTOCOL.into(), b"no session id");
            return false;
        }
    };
    // Over TCP the data moves on streams the client dials: no sockets to offer.
    let early = if shared.early_offers && !over_tcp {
        let local = conn.local_ip().map(|ip| ip.to_canonical());
        let peer = conn.remote_address().ip().to_canonical();
        EarlySockets::bind(shared.max_channels, local, peer, &shared.early_sockets)
    } else {
        None
    };
    if let Err(e) = send_offer(&conn, id, shared.max_channels, early.as_ref()).await {
        debug!(error = %e, "could not send the offer");
    }
    let Some(session) = handshake(&conn, &shared, id, early, handshaken, over_tcp).await else {
        return false;
    };
    drop(pending);
    let _open = shared.metrics.session();
    info!(session_id = %session.id, "session open");
    let session = Arc::new(session);
    let mut requests = JoinSet::new();
    loop {
        tokio::select! {
            stream = conn.accept_bi() => match stream {
                Ok((send, recv)) => {
                    let span = info_span!("request", stream = u64::from(send.id()));
                    let request = serve_request(conn.clone(), shared.clone(), session.clone(), send, recv);
                    requests.spawn(request.instrument(span));
                }
                Err(e) => {
                    info!(reason = %connection_error(&e), "session closed");
                    break;
                }
            },
            Some(_) = requests.join_next(), if !requests.is_empty() => {}
        }
    }
    // The requests see the closed connection on their next read and stop their channels.
    while requests.join_next().await.is_some() {}
    true
}

/// What an accepted session agreed on.
struct Session {
    id: SessionId,
    negotiated: Negotiated,
    /// What its token may do.
    access: Arc<Access>,
    /// Its places for transfers at once ([`MAX_TRANSFERS_PER_SESSION`]).
    transfers: Arc<Semaphore>,
    /// The sockets offered for an early upload, until the session's first request takes
    /// them ([`EARLY_REQUEST`]).
    early: std::sync::Mutex<Option<EarlySockets>>,
    /// Its token's index in the token file.
    token: usize,
    /// The grant it was admitted with, when its peer is a server reading for a third-party
    /// job: it reads the grant's paths only.
    granted: Option<sluice_session::grant::Grant>,
    /// It came over TCP: its transfers' data moves on TCP streams.
    over_tcp: bool,
    /// The relayed transfer it collects, when a collector's capability admitted it.
    collects: Option<TransferId>,
    /// Where its next relay hop this end sends (a collection) starts.
    hop_rate: super::relay::hop::HopRate,
}

/// Reads `Hello`, checks the token, version and spec, and answers `Welcome` with the session's
/// `id` (offered already); or refuses and closes the connection (`early`'s sockets close with
/// it, unread).
async fn handshake(
    conn: &quinn::Connection,
    shared: &Shared,
    id: SessionId,
    early: Option<EarlySockets>,
    mut handshaken: Option<quinn::ZeroRttAccepted>,
    over_tcp: bool,
) -> Option<Session> {
    let mut admission = ServerHandshake::new(
        Instant::now(),
        PROTOCOL_VERSION,
        id.to_string(),
        if over_tcp { shared.max_streams } else { shared.max_channels },
        HANDSHAKE_TIMEOUT,
    );
    let mut send = None;
    // The handshake stream and its first message, within the machine's deadline.
    let deadline = admission.poll_timeout().unwrap_or_else(Instant::now);
    match tokio::time::timeout_at(deadline.into(), conn.accept_bi()).await {
        Ok(Ok((stream, mut recv))) => {
            send = Some(stream);
            let left = deadline.saturating_duration_since(Instant::now());
            match read_message::<_, Request>(&mut recv, left).await {
                Ok(msg) => admission.handle_message(Instant::now(), msg),
                Err(e) => admission.handle_bad_message(frame_error(e, conn).to_string()),
            }
        }
        Ok(Err(e)) => {
            debug!(error = %e, "closed before the handshake");
            return None;
        }
        Err(_) => admission.handle_timeout(deadline),
    }
    let mut access = None;
    let mut granted = None;
    let mut collects = None;
    let negotiated = loop {
        match admission.poll_effect() {
            Some(HandshakeEffect::CheckGrant(claim))
                if claim.grant.starts_with(sluice_session::relay::CAPABILITY_TAG) =>
            {
                let verdict = match relay::check_capability(shared, conn, &claim) {
                    Ok((transfer, nothing)) => {
                        info!(transfer = claim.job, "a collector admitted");
                        access = Some((usize::MAX, nothing));
                        collects = Some(transfer);
                        TokenVerdict::Accepted { rate_cap: None }
                    }
                    Err(why) => TokenVerdict::Refused(why),
                };
                admission.handle_token(verdict);
            }
            Some(HandshakeEffect::CheckToken(token)) => {
                access = shared
                    .tokens
                    .verify(&token)
                    .and_then(|i| shared.access.get(i).map(|a| (i, a.clone())));
                let verdict = match &access {
                    Some((_, access)) => TokenVerdict::Accepted { rate_cap: access.rate_bps },
                    None => TokenVerdict::Refused("the token was not accepted".into()),
                };
                admission.handle_token(verdict);
            }
            Some(HandshakeEffect::CheckGrant(claim)) => {
                // The peer's certificate is known once the TLS handshake completed.
                if let Some(done) = handshaken.take() {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let _ = tokio::time::timeout(left, done).await;
                }
                let verdict = match check_grant(shared, conn, &claim) {
                    Ok((grant, token, read_only)) => {
                        let rate_cap = read_only.rate_bps;
                        info!(job = %grant.job, reader = %grant.reader, "a grant's reader admitted");
                        access = Some((token, read_only));
                        granted = Some(grant);
                        TokenVerdict::Accepted { rate_cap }
                    }
                    Err(why) => TokenVerdict::Refused(why),
                };
                admission.handle_token(verdict);
            }
            Some(HandshakeEffect::Refuse { code, message }) => {
                refuse_connection(shared, conn, send.as_mut(), code, &message).await;
                return None;
            }
            Some(HandshakeEffect::Open { welcome, negotiated }) => {
                let mut stream = send?;
                if shared.one_session.is_some()
                    && shared.claimed.swap(true, std::sync::atomic::Ordering::AcqRel)
                {
                    let message = "this one-shot server already serves its session";
                    refuse_connection(shared, conn, Some(&mut stream), ErrorCode::Auth, message)
                        .await;
                    return None;
                }
                if let Err(e) = write_message(&mut stream, &welcome).await {
                    debug!(error = %frame_error(e, conn), "could not answer the handshake");
                    return None;
                }
                let _ = stream.finish();
                break negotiated;
            }
            None => return None,
        }
    };
    let (token, access) = access?;
    let transfers = Arc::new(Semaphore::new(MAX_TRANSFERS_PER_SESSION));
    let early = std::sync::Mutex::new(early);
    let hop_rate = Default::default();
    Some(Session {
        id,
        negotiated,
        access,
        transfers,
        early,
        token,
        granted,
        over_tcp,
        collects,
        hop_rate,
    })
}

/// The check of a grant presented in a handshake: this server issues grants, the grant holds
/// for the certificate the peer proved, and its token still stands. The session then reads
/// only, under the issuing token's current root and limits.
fn check_grant(
    shared: &Shared,
    conn: &quinn::Connection,
    claim: &GrantClaim,
) -> Result<(sluice_session::grant::Grant, usize, Arc<Access>), String> {
    if !shared.third_party.mode.pushes() {
        return Err("this server does not serve third-party transfers (serve --third-party)".into());
    }
    let presenter = peer_fingerprint(conn);
    let (grant, token) = shared.grants.check(&shared.tokens, claim, presenter.as_ref())?;
    let base = shared.access.get(token).ok_or("the grant's token is gone")?;
    if !base.rights.read {
        return Err("the grant's token may no longer read".into());
    }
    let read_only = Access {
        rights: Rights { read: true, write: false, list: false, relay: false },
        root: base.root.clone(),
        transfers: base.transfers.clone(),
        rate_bps: base.rate_bps,
    };
    Ok((grant, token, Arc::new(read_only)))
}

/// Tells the client why (when a stream is open), gives it a moment to read that, and closes the
/// connection with the matching close code.
async fn refuse_connection(
    shared: &Shared,
    conn: &quinn::Connection,
    send: Option<&mut quinn::SendStream>,
    code: ErrorCode,
    message: &str,
) {
    warn!(?code, message, "session refused");
    shared.metrics.refused();
    if let Some(send) = send {
        let refused = Answer::Refused { code, message: message.to_owned() };
        if write_message(send, &refused).await.is_ok() {
            let _ = send.finish();
            // The client closes on reading the refusal; do not wait for it longer than this.
            let _ = tokio::time::timeout(REFUSAL_GRACE, conn.closed()).await;
        }
    }
    let close = if code == ErrorCode::Auth { close_code::AUTH } else { close_code::PROTOCOL };
    conn.close(close.into(), message.as_bytes());
}

/// One request stream: dispatches, and answers any failure with `Error`.
async fn serve_request(
    conn: quinn::Connection,
    shared: Arc<Shared>,
    session: Arc<Session>,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
) {
    let request = match read_message::<_, Request>(&mut recv, REPLY_TIMEOUT).await {
        Ok(msg) => msg,
        Err(e) => {
            debug!(error = %frame_error(e, &conn), "no request on the stream");
            return;
        }
    };
    // The offered sockets are the first request's, and only an early upload uses them.
    let early = if send.id().index() == EARLY_REQUEST {
        session.early.lock().unwrap_or_else(|e| e.into_inner()).take()
    } else {
        None
    };
    let mut ctx = RequestCtx {
        conn: &conn,
        shared: &shared,
        session: &session,
        request_id: u64::from(send.id()),
        send: &mut send,
        recv: &mut recv,
        told: false,
    };
    let outcome = match request {
        Request::Stat { path } => ctx.stat(&path).await,
        Request::List { path } => ctx.list(&path).await,
        Request::Get { paths, recursive, links, checksum, compress, udp_ports } => {
            let walk = WalkOptions { recursive, links, confine: None };
            ctx.get(&paths, walk, checksum, compress, udp_ports).await
        }
        Request::Put { dest, overwrite, checksum, preserve, dry_run, early: started } => {
            let options =
                ReceiveOptions { overwrite, checksum, preserve, confine: None, adopt: None };
            let early = Early { started, sockets: early };
            ctx.put(&dest, options, dry_run, early).await
        }
        Request::Grant { reader, paths } => ctx.grant(&reader, &paths).await,
        Request::Pull(job) => ctx.pull(job).await,
        Request::Deposit(deposit) => ctx.deposit(deposit).await,
        Request::Collect(collect) => ctx.collect(collect).await,
        Request::Discard(discard) => ctx.discard(discard).await,
        Request::Relayed(put) => ctx.relayed(put).await,
        Request::RelayedGet(get) => ctx.relayed_get(get).await,
        Request::Take(take) => ctx.take(take).await,
        Request::Jobs {} => ctx.jobs().await,
        Request::RelayRtts { relays } => ctx.relay_rtts(relays).await,
        Request::SpoolRoom {} => ctx.spool_room().await,
        Request::CancelJob { id } => ctx.cancel_job(&id).await,
        Request::Hello { .. } => Err(SessionError::Protocol("Hello on a request stream".into())),
    };
    let told = ctx.told;
    match outcome {
        Ok(()) => {}
        Err(err) => {
            warn!(error = %err, "request failed");
            shared.metrics.failed(err.code());
            if !told {
                // The client learns paths as it named them, not where the server keeps them.
                let message = unrooted(&err.detail(), &session.access.root);
                let _ = send.write_all(&failed_frame(err.code(), &message)).await;
            }
        }
    }
    let _ = send.finish();
}

/// An upload's early start: whether the client said it started, and the sockets offered for
/// it (when this is the session's first request).
struct Early {
    started: bool,
    sockets: Option<EarlySockets>,
}

/// Held while a transfer runs: its places among the server's, the session's and the token's
/// transfers.
struct TransferPermits {
    _server: tokio::sync::OwnedSemaphorePermit,
    _session: tokio::sync::OwnedSemaphorePermit,
    _token: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// The streams and context of one request.
struct RequestCtx<'a> {
    conn: &'a quinn::Connection,
    shared: &'a Shared,
    session: &'a Session,
    request_id: u64,
    send: &'a mut quinn::SendStream,
    recv: &'a mut quinn::RecvStream,
    /// Whether a transfer machine already told the client why the request failed.
    told: bool,
}

impl<'a> RequestCtx<'a> {
    async fn write(&mut self, msg: &Answer) -> Result<(), SessionError> {
        write_message(self.send, msg).await.map_err(|e| frame_error(e, self.conn))
    }

    /// Over TCP, where this request's data streams come in.
    fn streams_opener(&self) -> Option<Opener<'a>> {
        let shared: &'a Shared = self.shared;
        self.session.over_tcp.then_some(Opener::Door(&shared.door))
    }

    fn setup(&self) -> ChannelSetup<'a> {
        let shared: &'a Shared = self.shared;
        ChannelSetup {
            conn: self.conn,
            role: Role::Server,
            session_id: self.session.id,
            negotiated: self.session.negotiated,
            base: &shared.channel,
            request_id: self.request_id,
            phase: 0,
            streams: self.streams_opener(),
            udp_blocked: None,
        }
    }

    /// A place among the session's, the token's (when it is limited) and the server's transfers.
    /// The first two are the client's own to mind: when they are taken the answer is `busy` at
    /// once. A place among the server's is waited for, in turn, up to [`TRANSFER_WAIT`]; the
    /// flag says whether it was.
    async fn acquire_transfer(&self) -> Result<(TransferPermits, bool), SessionError> {
        let token = token_place(&self.session.access)?;
        let session = self.session.transfers.clone().try_acquire_owned().map_err(|_| {
            SessionError::Busy(format!(
                "this session runs {MAX_TRANSFERS_PER_SESSION} transfers already; wait for one"
            ))
        })?;
        let (server, waited) = tokio::select! {
            place = server_place(&self.shared.transfers) => place?,
            _ = self.conn.closed() => {
                let why = "the session closed while its transfer waited for a place";
                return Err(SessionError::Network(why.into()));
            }
        };
        Ok((TransferPermits { _server: server, _session: session, _token: token }, waited))
    }

    /// The digest of the session's token: how a job kept across a restart names it (its line
    /// in the token file may change).
    fn token_digest(&self) -> Option<[u8; 32]> {
        self.shared.tokens.digests().get(self.session.token).copied()
    }

    /// Refuses the request unless the session's token has `right`.
    fn require(&self, right: fn(&Rights) -> bool, what: &str) -> Result<(), SessionError> {
        self.session.access.require(right, what)
    }

    /// Refuses a path a grant's reader may not read (any path is fine in a token's session).
    fn covered(&self, requested: &str) -> Result<(), SessionError> {
        match &self.session.granted {
            None => Ok(()),
            Some(grant) => {
                grant.covers(requested).map_err(|e| SessionError::Refused(e.to_string()))
            }
        }
    }

    async fn stat(&mut self, requested: &str) -> Result<(), SessionError> {
        self.covered(requested)?;
        let access = self.session.access.clone();
        let req = requested.to_owned();
        let info = blocking(move || access.stat(&req)).await?;
        debug!(path = requested, ?info, "stat");
        self.write(&Answer::StatInfo(info)).await
    }

    /// The listing of `requested`, as manifest parts.
    async fn list(&mut self, requested: &str) -> Result<(), SessionError> {
        let access = self.session.access.clone();
        let req = requested.to_owned();
        let listing = blocking(move || access.list(&req)).await?;
        debug!(
            path = requested,
            entries = listing.entries.len(),
            skipped = listing.skipped,
            "list"
        );
        send_listing(self.send, self.conn, &listing.entries).await
    }

    fn channels(&self) -> Channels<'a> {
        Channels {
            setup: self.setup(),
            fault: self.shared.fault,
            memory: self.shared.memory.clone(),
            carrier: None,
        }
    }

    fn timeouts(&self) -> Timeouts {
        Timeouts { digests: self.shared.digest_timeout, ..Timeouts::default() }
    }

    /// A download: this end runs the sending role.
    async fn get(
        &mut self,
        requested: &[String],
        walk_options: WalkOptions,
        checksum: bool,
        compress: Option<i32>,
        client_ports: Vec<u16>,
    ) -> Result<(), SessionError> {
        self.require(|r| r.read, "read (download)")?;
        for path in requested {
            self.covered(path)?;
        }
        check_level(compress)?;
        let channels = self.session.negotiated.channels as usize;
        if !client_ports.is_empty() && client_ports.len() < channels {
            return Err(SessionError::Protocol(format!(
                "{} data ports in Get for {channels} channels",
                client_ports.len()
            )));
        }
        let (_permit, _) = self.acquire_transfer().await?;
        let (access, paths) = (self.session.access.clone(), requested.to_vec());
        let outgoing = blocking(move || access.outgoing(&paths, walk_options, checksum)).await?;
        // A transfer from here on: the sources were found.
        let _running = self.shared.metrics.transfer(true);
        for skipped in &outgoing.skipped {
            debug!(skipped, "not sent");
        }
        let channels = self.channels();
        let now = std::time::Instant::now();
        let machine = if client_ports.is_empty() {
            Sending::new(now, &outgoing.entries, self.timeouts())
        } else {
            // The client's sockets listen already: the data goes right behind the manifest.
            let ports = client_ports[..self.session.negotiated.channels as usize].to_vec();
            Sending::new_early(now, &outgoing.entries, self.timeouts(), ports)
        };
        let root = self.session.access.root.clone();
        let mut wire = Wire::new(self.conn, self.send, self.recv);
        wire.hide = Some(&root);
        let sent = run_sending(machine, &mut wire, &channels, &outgoing, compress, None).await;
        self.told = wire.told;
        let sent = match sent {
            Ok(sent) => sent,
            Err(err) if wire.peer_failed => {
                // The client's failure is its own to report; this end only logs it.
                warn!(error = %err, "the client could not take the files");
                return Ok(());
            }
            Err(err) => return Err(err),
        };
        if sent.sent.dry_run {
            info!(paths = ?requested, files = sent.wanted.len(), "dry run answered");
            return Ok(());
        }
        if let Some(report) = &sent.report {
            log_channel("sent", report);
        }
        if let Some(report) = &sent.repair_report {
            log_channel("sent again", report);
            info!(blocks = sent.sent.repaired, "repaired");
            self.shared.metrics.repaired(sent.sent.repaired);
        }
        // The channels' packet counts when they reported (they may have been stopped by the
        // client's answer before their last ACK).
        let packets = sent.report.as_ref().map_or((0, 0), |r| (r.data_pkts, r.retransmitted_pkts));
        info!(files = sent.wanted.len(), size = sent.size, "client verified the files");
        self.shared.metrics.moved(true, sent.sent.moved, packets.0, packets.1);
        if let Some(grant) = &self.session.granted {
            // The job's read is done: its grant reads nothing more.
            info!(job = %grant.job, "a third-party job's read ended");
            self.shared.grants.end(grant);
        }
        Ok(())
    }

    /// A third-party transfer's source end: a grant for another server to read `paths` for
    /// one job, within this token's rights and root.
    async fn grant(&mut self, reader: &str, paths: &[String]) -> Result<(), SessionError> {
        if !self.shared.third_party.mode.pushes() {
            return Err(SessionError::Refused(
                "this server does not serve third-party transfers (serve --third-party)".into(),
            ));
        }
        if self.session.granted.is_some() {
            return Err(SessionError::Refused("a grant's reader cannot grant".into()));
        }
        self.require(|r| r.read, "read (a grant lets another server read for it)")?;
        reader
            .parse::<Fingerprint>()
            .map_err(|e| SessionError::Config(format!("the reader's fingerprint: {e}")))?;
        // The paths must be there, beneath the token's root, as a download's sources.
        let access = self.session.access.clone();
        let asked = paths.to_vec();
        blocking(move || asked.iter().try_for_each(|p| access.stat(p).map(drop))).await?;
        let (grant, job, expires_at) =
            self.shared.grants.issue(&self.shared.tokens, self.session.token, reader, paths)?;
        info!(%job, reader, ?paths, "grant issued");
        self.write(&Answer::Granted { grant, job, expires_at }).await
    }

    /// A third-party transfer's destination end: starts the job (or follows it, when the same
    /// one runs already) and reports its progress and end. The job goes on if the client
    /// leaves.
    async fn pull(&mut self, pull: PullJob) -> Result<(), SessionError> {
        if !self.shared.third_party.mode.pulls() {
            return Err(SessionError::Refused(
                "this server does not take third-party jobs (serve --third-party)".into(),
            ));
        }
        // A grant's reader reads only: it has no write right.
        self.require(|r| r.write, "write (a third-party job writes here)")?;
        let (source, fingerprint) = Jobs::check(&pull)?;
        self.shared.third_party.may_dial(source, &fingerprint)?;
        let access = self.session.access.clone();
        let dest = pull.dest.clone();
        blocking(move || access.resolve(&dest).map(drop)).await?;
        let record = JobRecord {
            token: self.session.token,
            token_digest: self.token_digest().map(|d| sluice_session::relay::to_hex(&d)),
            root: self.session.access.root.clone(),
            pull,
        };
        let limit = self.session.access.transfers.as_ref().map(|(_, places)| places.clone());
        let (mut state, attached) = self.shared.jobs.start_or_attach(record, limit)?;
        let mut reported: Option<Instant> = None;
        loop {
            let now = state.borrow_and_update().clone();
            match now.end {
                // The end is said at once.
                Some(Ok(mut done)) => {
                    done.attached = attached;
                    return self.write(&Answer::JobDone(done)).await;
                }
                Some(Err((code, message))) => {
                    return Err(SessionError::from_peer(super::Peer::Server, code, message));
                }
                // Progress at most a few times a second, and every few seconds while nothing
                // moves (so the client knows the job is alive).
                None if reported.is_none_or(|t| t.elapsed() >= JOB_REPORT_EVERY) => {
                    self.write(&Answer::JobProgress(now.progress)).await?;
                    reported = Some(Instant::now());
                }
                None => {}
            }
            let _ = tokio::time::timeout(JOB_REPORT_IDLE, state.changed()).await;
        }
    }

    /// The token's jobs here (`sluice jobs`): third-party pulls and relayed uploads'
    /// collections, running, stalled and ended lately.
    async fn jobs(&mut self) -> Result<(), SessionError> {
        self.require(|r| r.write, "list jobs (jobs write here: that needs the write right)")?;
        let jobs = self.job_list();
        debug!(jobs = jobs.len(), "jobs listed");
        self.write(&super::job_log::answer(jobs)).await
    }

    /// The session's token's jobs, of every kind.
    fn job_list(&self) -> Vec<JobInfo> {
        let mut jobs = self.shared.jobs.list(self.session.token);
        jobs.extend(self.shared.collections.list(self.session.token));
        jobs
    }

    /// Cancels the token's job `id` and answers with its listing once it ended (within
    /// [`CANCEL_WAIT`]; else as it stands, still running).
    async fn cancel_job(&mut self, id: &str) -> Result<(), SessionError> {
        self.require(|r| r.write, "cancel jobs (jobs write here: that needs the write right)")?;
        let token = self.session.token;
        let (jobs, collections) = (self.shared.jobs.clone(), self.shared.collections.clone());
        let asked = id.to_owned();
        let found =
            blocking(move || Ok(jobs.cancel(token, &asked) || collections.cancel(token, &asked)))
                .await?;
        if !found {
            return Err(SessionError::NotFound(format!(
                "no running or stalled job {id} of this token here (sluice jobs lists them)"
            )));
        }
        info!(job = id, "job cancelled by its client");
        let waited = Instant::now();
        loop {
            let this: Vec<JobInfo> = self.job_list().into_iter().filter(|j| j.id == id).collect();
            let ended = !this.is_empty() && this.iter().all(|j| j.phase != JobPhase::Running);
            if ended || waited.elapsed() >= CANCEL_WAIT {
                return self.write(&Answer::Jobs { jobs: this }).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// An upload: this end runs the receiving role.
    async fn put(
        &mut self,
        requested: &str,
        options: ReceiveOptions,
        dry_run: bool,
        early: Early,
    ) -> Result<(), SessionError> {
        // The same checks as the web app's uploads (`sluice::web::receive_files`).
        let access = self.session.access.clone();
        let req = requested.to_owned();
        let (dest, options) = blocking(move || {
            let mut options = options;
            access.incoming(&req, &mut options).map(|dest| (dest, options))
        })
        .await?;
        let (_permit, waited) = self.acquire_transfer().await?;
        // The early data is taken only when the sockets are still there (the client's first
        // request) and no wait for a place made the client's channels wait as long.
        let sockets = early
            .sockets
            .filter(|_| early.started && !waited)
            .map(|s| s.take(self.session.negotiated.channels));
        let _running = self.shared.metrics.transfer(false);
        let channels = self.channels();
        let now = std::time::Instant::now();
        let machine = if early.started {
            Receiving::new_early(now, self.timeouts(), sockets.is_some())
        } else {
            Receiving::new(now, self.timeouts())
        };
        let root = self.session.access.root.clone();
        let mut wire = Wire::new(self.conn, self.send, self.recv);
        wire.hide = Some(&root);
        let destination = Destination { dest, options, dry_run, early: sockets };
        let received = run_receiving(machine, &mut wire, &channels, destination, None).await;
        self.told = wire.told;
        let mut received = received?;
        if dry_run {
            debug!(files = received.files, "dry run answered");
            return Ok(());
        }
        if received.received.repaired > 0 {
            info!(blocks = received.received.repaired, "repaired");
            self.shared.metrics.repaired(received.received.repaired);
        }
        info!(
            path = requested,
            files = received.committed.files,
            links = received.committed.links,
            size = received.size,
            "stored and verified"
        );
        let report = match received.lingering.as_mut() {
            Some(lingering) => lingering.report().await,
            None => received.report.take(),
        };
        if let Some(r) = report.filter(|r| r.channels > 0) {
            log_channel("received", &r);
            self.shared.metrics.moved(false, r.bytes, r.data_pkts, r.retransmitted_pkts);
        }
        Ok(())
    }
}

fn log_channel(what: &str, report: &ChannelReport) {
    info!(
        what,
        bytes = report.bytes,
        seconds = report.seconds,
        data_pkts = report.data_pkts,
        retransmitted_pkts = report.retransmitted_pkts,
        rejected_pkts = report.rejected_pkts,
        "data channel done"
    );
}
