//! The serving end: accepts QUIC connections, authenticates each session by its token, and
//! serves `Stat`, `Get` and `Put` requests for files under one root directory.
//!
//! Every connection is a Tokio task and every request stream another; data channels run on the
//! blocking pool (`spawn_blocking`), each with its own UDP socket on the server's address. The
//! bounds: [`MAX_CONNECTIONS`] sessions ([`MAX_UNAUTHENTICATED`] of them, and
//! [`MAX_UNAUTHENTICATED_PER_IP`] from one address, before their token is accepted),
//! [`MAX_REQUESTS_PER_SESSION`] concurrent requests and [`MAX_TRANSFERS_PER_SESSION`] transfers
//! per session, and [`MAX_TRANSFERS`] transfers in the whole server (beyond them a request is
//! answered `busy`).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use sluice_proto::config::ChannelConfig;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::{Instrument, debug, info, info_span, warn};

use super::channel::{
    ChannelSetup, DataTask, HANDSHAKE_TIMEOUT, Negotiated, REPLY_TIMEOUT, bind_data_sockets,
    blocking, control_transport, default_channel_config, frame_error, hash_budget,
};
use super::copy::{check_level, kept_pairs, resume_offers, resume_verdict};
use super::digest::{self, Messages, Receiving};
use super::identity::{Fingerprint, Identity};
use super::keys::{Role, SessionId};
use super::manifest_io::{recv_manifest, send_manifest};
use super::messages::Want;
use super::messages::{
    ClientMsg, ErrorCode, FileKind, ServerMsg, StatInfo, read_message, write_message,
};
use super::metrics::Metrics;
use super::repair::{self, Link, data_store};
use super::tokens::{Grant, Rights, TokenSet};
use super::{
    MAX_CHANNELS, PROTOCOL_VERSION, SessionError, auto_channels, close_code, connection_error,
};
use super::{add_checksums, mismatch_error, plan_error, walk_error, wanted_files};
use crate::datapath::{self, ChannelReport, Fault};
use crate::files::{self, Confined, PathError};
use crate::tree::manifest::to_ranges;
use crate::tree::{ReceiveOptions, WalkError, WalkOptions, plan, walk};

/// Sessions served at once; further connection attempts are refused.
pub const MAX_CONNECTIONS: usize = 256;
/// Connections not yet authenticated (QUIC handshake or `Hello` pending), in all.
pub const MAX_UNAUTHENTICATED: usize = 64;
/// Connections not yet authenticated from one IP address.
pub const MAX_UNAUTHENTICATED_PER_IP: usize = 8;
/// Beyond this many unauthenticated connections, a new peer must first prove its address with
/// a QUIC Retry (stateless: a spoofed source cannot take a place).
const RETRY_ABOVE: usize = 16;
/// Requests one session may have in flight (the QUIC stream limit).
pub const MAX_REQUESTS_PER_SESSION: u32 = 16;
/// Transfers one session may run at once (each may hold a manifest in memory); further ones
/// are answered `busy`.
pub const MAX_TRANSFERS_PER_SESSION: usize = 4;
/// Data channels the whole server runs at once; further transfers are answered `busy`.
pub const MAX_TRANSFERS: usize = 32;
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
    fn load(&self) -> Result<(Identity, TokenSet), SessionError> {
        match self {
            Credentials::Stored { state_dir, tokens_file } => {
                Ok((Identity::load_or_create(state_dir)?, TokenSet::load(tokens_file)?))
            }
            Credentials::OneTime { token, .. } => {
                Ok((Identity::ephemeral()?, TokenSet::single(token)))
            }
        }
    }
}

/// What one token may do, resolved against the served directory.
#[derive(Debug)]
struct Access {
    rights: Rights,
    /// The directory the token sees (canonical, under the served one).
    root: PathBuf,
    /// Its transfers at once, when limited.
    transfers: Option<(u32, Arc<Semaphore>)>,
    /// The most each transfer may send, in bits per second.
    rate_bps: Option<u64>,
}

impl Access {
    /// `grant` with its root resolved under `served`: the directory must exist there, and
    /// stay there once symbolic links are followed.
    /// `number` counts the file's tokens from 1 (an error must not show the token).
    fn resolve(served: &Path, grant: &Grant, number: usize) -> Result<Access, SessionError> {
        let root = match &grant.root {
            None => served.to_owned(),
            Some(sub) => {
                let bad = |why: String| {
                    SessionError::Config(format!(
                        "token {number} of the token file: root {sub:?} {why}"
                    ))
                };
                let path = std::fs::canonicalize(served.join(sub))
                    .map_err(|e| bad(format!("cannot be opened: {e}")))?;
                if !path.starts_with(served) {
                    return Err(bad("leads outside the served directory".into()));
                }
                if !path.is_dir() {
                    return Err(bad("is not a directory".into()));
                }
                path
            }
        };
        Ok(Access {
            rights: grant.rights,
            root,
            transfers: grant.transfers.map(|n| (n, Arc::new(Semaphore::new(n as usize)))),
            rate_bps: grant.rate_bps,
        })
    }
}

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
    /// Unauthenticated connections by source address.
    unauthenticated: std::sync::Mutex<std::collections::HashMap<IpAddr, usize>>,
}

/// A bound server; [`Server::run`] serves it.
#[derive(Debug)]
pub struct Server {
    endpoint: quinn::Endpoint,
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
        let (identity, tokens) = config.credentials.load()?;
        let one_session = match config.credentials {
            Credentials::OneTime { wait, .. } => Some(wait),
            Credentials::Stored { .. } => None,
        };

        let mut transport = control_transport();
        let idle = quinn::IdleTimeout::try_from(config.idle_timeout)
            .map_err(|_| SessionError::Config("idle_timeout is too large".into()))?;
        transport
            .max_idle_timeout(Some(idle))
            .max_concurrent_bidi_streams(MAX_REQUESTS_PER_SESSION.into())
            .max_concurrent_uni_streams(0u32.into());
        let mut server_config = quinn::ServerConfig::with_crypto(Arc::new(identity.server_tls()?));
        server_config.transport_config(Arc::new(transport));

        let endpoint = quinn::Endpoint::server(server_config, config.listen)
            .map_err(|e| SessionError::io(format!("binding {}", config.listen), e))?;
        let local_addr = endpoint
            .local_addr()
            .map_err(|e| SessionError::io("reading the endpoint's address", e))?;
        let access = tokens
            .grants()
            .iter()
            .enumerate()
            .map(|(i, grant)| Access::resolve(&root, grant, i + 1).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        info!(%local_addr, fingerprint = %identity.fingerprint(), root = %root.display(), tokens = tokens.len(), "server bound");
        Ok(Server {
            endpoint,
            shared: Arc::new(Shared {
                root,
                tokens,
                access,
                transfers: Arc::new(Semaphore::new(MAX_TRANSFERS)),
                channel: default_channel_config(),
                max_channels: config.max_channels.unwrap_or_else(auto_channels),
                digest_timeout: config.digest_timeout,
                fault: config.fault,
                metrics: Arc::default(),
                one_session,
                claimed: false.into(),
                unauthenticated: Default::default(),
            }),
            fingerprint: identity.fingerprint().clone(),
            local_addr,
        })
    }

    /// The server's counters (live: they keep counting while it runs).
    pub fn metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
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
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), SessionError> {
        let mut shutdown = std::pin::pin!(shutdown);
        let wait = self.shared.one_session;
        let deadline = tokio::time::sleep(wait.unwrap_or(Duration::MAX / 4));
        let mut deadline = std::pin::pin!(deadline);
        let mut sessions = JoinSet::new();
        let mut result = Ok(());
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
                    if sessions.len() >= MAX_CONNECTIONS {
                        warn!(remote = %incoming.remote_address(), "too many sessions: refusing a connection");
                        incoming.refuse();
                        continue;
                    }
                    let ip = incoming.remote_address().ip().to_canonical();
                    let (from_ip, all) = self.shared.unauthenticated_counts(ip);
                    if !incoming.remote_address_validated() && all >= RETRY_ABOVE {
                        let _ = incoming.retry();
                        continue;
                    }
                    if from_ip >= MAX_UNAUTHENTICATED_PER_IP || all >= MAX_UNAUTHENTICATED {
                        debug!(%ip, from_ip, all, "too many unauthenticated connections: refusing one");
                        self.shared.metrics.refused();
                        incoming.refuse();
                        continue;
                    }
                    let pending = Unauthenticated::new(self.shared.clone(), ip);
                    let span = info_span!("session", remote = %incoming.remote_address());
                    sessions.spawn(serve_connection(incoming, pending).instrument(span));
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
        let _ = tokio::time::timeout(Duration::from_secs(1), self.endpoint.wait_idle()).await;
        result
    }
}

/// A place among the unauthenticated connections, given back on drop.
struct Unauthenticated {
    shared: Arc<Shared>,
    ip: IpAddr,
}

impl Unauthenticated {
    fn new(shared: Arc<Shared>, ip: IpAddr) -> Unauthenticated {
        *shared.unauthenticated.lock().unwrap_or_else(|e| e.into_inner()).entry(ip).or_default() +=
            1;
        Unauthenticated { shared, ip }
    }
}

impl Drop for Unauthenticated {
    fn drop(&mut self) {
        let mut counts = self.shared.unauthenticated.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = counts.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

impl Shared {
    /// Unauthenticated connections from `ip`, and in all.
    fn unauthenticated_counts(&self, ip: IpAddr) -> (usize, usize) {
        let counts = self.unauthenticated.lock().unwrap_or_else(|e| e.into_inner());
        (counts.get(&ip).copied().unwrap_or(0), counts.values().sum())
    }

    /// Whether a one-shot server's session has begun.
    fn claimed(&self) -> bool {
        self.claimed.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// One session: handshake, then requests until the connection ends. Returns whether a session
/// was established. `pending` holds the connection's place among the unauthenticated ones
/// until its token is accepted; the QUIC handshake and `Hello` each get [`HANDSHAKE_TIMEOUT`].
async fn serve_connection(incoming: quinn::Incoming, pending: Unauthenticated) -> bool {
    let shared = pending.shared.clone();
    let conn = match tokio::time::timeout(HANDSHAKE_TIMEOUT, incoming).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => {
            debug!(error = %e, "handshake failed");
            return false;
        }
        Err(_) => {
            debug!("no QUIC handshake within the deadline");
            return false;
        }
    };
    let Some(session) = handshake(&conn, &shared).await else { return false };
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
}

/// Reads `Hello`, checks the token, version and spec, and answers `Welcome`; or refuses and
/// closes the connection.
async fn handshake(conn: &quinn::Connection, shared: &Shared) -> Option<Session> {
    let (mut send, mut recv) = match tokio::time::timeout(HANDSHAKE_TIMEOUT, conn.accept_bi()).await
    {
        Ok(Ok(streams)) => streams,
        Ok(Err(e)) => {
            debug!(error = %e, "closed before the handshake");
            return None;
        }
        Err(_) => {
            refuse_connection(shared, conn, None, ErrorCode::Auth, "no Hello within the deadline")
                .await;
            return None;
        }
    };
    let hello = match read_message::<_, ClientMsg>(&mut recv, HANDSHAKE_TIMEOUT).await {
        Ok(msg) => msg,
        Err(e) => {
            let message = format!("bad handshake: {}", frame_error(e, conn));
            refuse_connection(shared, conn, Some(&mut send), ErrorCode::Protocol, &message).await;
            return None;
        }
    };
    let ClientMsg::Hello { version, token, spec } = hello else {
        let message = "the first message must be Hello with a token";
        refuse_connection(shared, conn, Some(&mut send), ErrorCode::Auth, message).await;
        return None;
    };
    let Some(access) = shared.tokens.verify(&token).and_then(|i| shared.access.get(i).cloned())
    else {
        refuse_connection(
            shared,
            conn,
            Some(&mut send),
            ErrorCode::Auth,
            "the token was not accepted",
        )
        .await;
        return None;
    };
    if version != PROTOCOL_VERSION {
        let message = format!("protocol version {version} is not spoken here ({PROTOCOL_VERSION})");
        refuse_connection(shared, conn, Some(&mut send), ErrorCode::Protocol, &message).await;
        return None;
    }
    let negotiated = match Negotiated::from_spec(&spec) {
        Ok(n) => n.choose(shared.max_channels, access.rate_bps),
        Err(message) => {
            refuse_connection(shared, conn, Some(&mut send), ErrorCode::Protocol, &message).await;
            return None;
        }
    };
    let id = match SessionId::random() {
        Ok(id) => id,
        Err(e) => {
            refuse_connection(shared, conn, Some(&mut send), ErrorCode::Io, &e.detail()).await;
            return None;
        }
    };
    if shared.one_session.is_some()
        && shared.claimed.swap(true, std::sync::atomic::Ordering::AcqRel)
    {
        let message = "this one-shot server already serves its session";
        refuse_connection(shared, conn, Some(&mut send), ErrorCode::Auth, message).await;
        return None;
    }
    let welcome = ServerMsg::Welcome { session_id: id.to_string(), spec: negotiated.to_spec() };
    if let Err(e) = write_message(&mut send, &welcome).await {
        debug!(error = %frame_error(e, conn), "could not answer the handshake");
        return None;
    }
    let _ = send.finish();
    let transfers = Arc::new(Semaphore::new(MAX_TRANSFERS_PER_SESSION));
    Some(Session { id, negotiated, access, transfers })
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
        let refused = ServerMsg::Refused { code, message: message.to_owned() };
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
    let request = match read_message::<_, ClientMsg>(&mut recv, REPLY_TIMEOUT).await {
        Ok(msg) => msg,
        Err(e) => {
            debug!(error = %frame_error(e, &conn), "no request on the stream");
            return;
        }
    };
    let mut ctx = RequestCtx {
        conn: &conn,
        shared: &shared,
        session: &session,
        request_id: u64::from(send.id()),
        send: &mut send,
        recv: &mut recv,
    };
    let outcome = match request {
        ClientMsg::Stat { path } => ctx.stat(&path).await,
        ClientMsg::List { path } => ctx.list(&path).await,
        ClientMsg::Get { paths, recursive, links, checksum, compress } => {
            let walk = WalkOptions { recursive, links, confine: None };
            ctx.get(&paths, walk, checksum, compress).await
        }
        ClientMsg::Put { dest, overwrite, checksum, preserve, dry_run } => {
            let options = ReceiveOptions { overwrite, checksum, preserve, confine: None };
            ctx.put(&dest, options, dry_run).await
        }
        other => Err(SessionError::Protocol(format!("unexpected message {other:?}"))),
    };
    match outcome {
        Ok(()) => {}
        Err(err) => {
            warn!(error = %err, "request failed");
            shared.metrics.failed(err.code());
            // The client learns paths as it named them, not where the server keeps them.
            let message = unrooted(&err.detail(), &session.access.root);
            let reply = ServerMsg::Error { code: err.code(), message };
            let _ = write_message(&mut send, &reply).await;
        }
    }
    let _ = send.finish();
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
}

impl<'a> RequestCtx<'a> {
    async fn write(&mut self, msg: &ServerMsg) -> Result<(), SessionError> {
        write_message(self.send, msg).await.map_err(|e| frame_error(e, self.conn))
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
        }
    }

    /// A place among the server's transfers, and among the token's when it is limited.
    fn acquire_transfer(&self) -> Result<TransferPermits, SessionError> {
        let token = match &self.session.access.transfers {
            None => None,
            Some((n, places)) => Some(places.clone().try_acquire_owned().map_err(|_| {
                SessionError::Busy(format!(
                    "this token's {n} transfers at once are all running; try again when one ends"
                ))
            })?),
        };
        let session = self.session.transfers.clone().try_acquire_owned().map_err(|_| {
            SessionError::Busy(format!(
                "this session runs {MAX_TRANSFERS_PER_SESSION} transfers already; wait for one"
            ))
        })?;
        let server = self.shared.transfers.clone().try_acquire_owned().map_err(|_| {
            SessionError::Busy(format!("{MAX_TRANSFERS} transfers are running; try again later"))
        })?;
        Ok(TransferPermits { _server: server, _session: session, _token: token })
    }

    /// Refuses the request unless the session's token has `right`.
    fn require(&self, right: fn(&Rights) -> bool, what: &str) -> Result<(), SessionError> {
        if right(&self.session.access.rights) {
            Ok(())
        } else {
            Err(SessionError::Refused(format!("this token may not {what}")))
        }
    }

    /// Reads the client's `Ready` and returns its data ports.
    async fn client_ready(&mut self) -> Result<Vec<u16>, SessionError> {
        match read_message(self.recv, REPLY_TIMEOUT).await.map_err(|e| frame_error(e, self.conn))? {
            ClientMsg::Ready { udp_ports } => Ok(udp_ports),
            ClientMsg::Failed { code, message } => Err(SessionError::from_client(code, message)),
            other => Err(SessionError::Protocol(format!("expected Ready, got {other:?}"))),
        }
    }

    fn client_ip(&self) -> IpAddr {
        self.conn.remote_address().ip().to_canonical()
    }

    /// One data socket per negotiated channel, and their ports.
    fn data_sockets(&self) -> Result<(Vec<std::net::UdpSocket>, Vec<u16>), SessionError> {
        let local = self.conn.local_ip().map(|ip| ip.to_canonical());
        bind_data_sockets(self.session.negotiated.channels, local, self.client_ip())
    }

    async fn stat(&mut self, requested: &str) -> Result<(), SessionError> {
        self.require(|r| r.list || r.read, "look at files (it has neither list nor read)")?;
        let root = self.session.access.root.clone();
        let req = requested.to_owned();
        let info = blocking(move || {
            let path = resolve(&root, &req)?;
            let fs = Confined::new(Some(&root)).map_err(|e| open_error(&req, e))?;
            let meta = fs.metadata(&path).map_err(|e| open_error(&req, e))?;
            let kind = if meta.is_file() {
                FileKind::File
            } else if meta.is_dir() {
                FileKind::Directory
            } else {
                FileKind::Other
            };
            Ok(StatInfo { size: meta.len(), mtime: mtime_secs(&meta), kind })
        })
        .await?;
        debug!(path = requested, ?info, "stat");
        self.write(&ServerMsg::StatInfo(info)).await
    }

    /// The listing of `requested`, as manifest parts.
    async fn list(&mut self, requested: &str) -> Result<(), SessionError> {
        self.require(|r| r.list, "list directories")?;
        let root = self.session.access.root.clone();
        let req = requested.to_owned();
        let listing = blocking(move || {
            let path = resolve(&root, if req.is_empty() { "." } else { &req })?;
            // Errors name the requested path, never the server's own layout.
            let fs = Confined::new(Some(&root)).map_err(|e| open_error(&req, e))?;
            crate::tree::list(&fs, &path).map_err(|e| match e {
                WalkError::Io(_, source) => open_error(&req, source),
                other => walk_error(other),
            })
        })
        .await?;
        debug!(
            path = requested,
            entries = listing.entries.len(),
            skipped = listing.skipped,
            "list"
        );
        send_manifest(self.send, self.conn, &listing.entries, ServerMsg::Manifest).await
    }

    /// Binds the data sockets, sends `Ready`, and reads the client's: the channels' parameters.
    async fn exchange_ready(&mut self) -> Result<Vec<datapath::ChannelParams>, SessionError> {
        let (sockets, udp_ports) = self.data_sockets()?;
        self.write(&ServerMsg::Ready { udp_ports }).await?;
        let peer_ports = self.client_ready().await?;
        self.setup().params(sockets, self.client_ip(), &peer_ports)
    }

    async fn get(
        &mut self,
        requested: &[String],
        mut walk_options: WalkOptions,
        checksum: bool,
        compress: Option<i32>,
    ) -> Result<(), SessionError> {
        self.require(|r| r.read, "read (download)")?;
        check_level(compress)?;
        let _permit = self.acquire_transfer()?;
        let root = self.session.access.root.clone();
        walk_options.confine = Some(root.clone());
        let paths = requested.to_vec();
        let outgoing = blocking(move || {
            let sources = paths
                .iter()
                .map(|p| {
                    let source = resolve(&root, if p.is_empty() { "." } else { p })?;
                    // A missing source is named as the client asked for it, never by the
                    // server's own path.
                    source.symlink_metadata().map_err(|e| open_error(p, e))?;
                    Ok(source)
                })
                .collect::<Result<Vec<_>, SessionError>>()?;
            let mut outgoing = walk(&sources, &walk_options).map_err(walk_error)?;
            if checksum {
                add_checksums(&mut outgoing)?;
            }
            Ok(outgoing)
        })
        .await?;
        // A transfer from here on: the sources were found.
        let _running = self.shared.metrics.transfer(true);
        for skipped in &outgoing.skipped {
            debug!(skipped, "not sent");
        }
        send_manifest(self.send, self.conn, &outgoing.entries, ServerMsg::Manifest).await?;
        let want = match read_message(self.recv, REPLY_TIMEOUT)
            .await
            .map_err(|e| frame_error(e, self.conn))?
        {
            ClientMsg::Want(want) => want,
            ClientMsg::Failed { code, message } => {
                info!(?code, message, "the client declined the manifest");
                return Ok(());
            }
            other => return Err(SessionError::Protocol(format!("expected Want, got {other:?}"))),
        };
        let files = Arc::new(wanted_files(&outgoing, &want)?);
        let size = files.total();
        let count = files.len();
        // The client's data ports come right behind `Want` when any wanted file has bytes, so
        // the data can leave with this end's `Ready`, without a round trip for them.
        let peer_ports = match size {
            0 => None,
            _ => Some(self.client_ready().await?),
        };
        let (store, offers) = (files.clone(), want.resume.clone());
        let verdict = blocking(move || resume_verdict(&store, &offers)).await?;
        if !want.resume.is_empty() {
            self.write(&ServerMsg::Resumed { kept: verdict.kept.clone() }).await?;
        }
        let moving = verdict.moving();
        let ranges = verdict.ranges;
        info!(paths = ?requested, files = count, size, moving, channels = self.session.negotiated.channels, "sending");
        let data = data_store(&files, self.shared.fault, true);
        let sending = match peer_ports.filter(|_| moving > 0) {
            None => None,
            Some(peer_ports) => {
                let (sockets, udp_ports) = self.data_sockets()?;
                self.write(&ServerMsg::Ready { udp_ports }).await?;
                let params = self.setup().params(sockets, self.client_ip(), &peer_ports)?;
                let store = data.clone();
                Some(DataTask::spawn(move |cancel| {
                    datapath::send(params, &*store, &ranges, compress, &mut |_| {}, cancel)
                }))
            }
        };
        let streams = (&mut *self.send, &mut *self.recv);
        let wait = hash_budget(size);
        let sent = digest::run_sending::<ServerMsg, ClientMsg>(
            sending,
            files.clone(),
            streams,
            self.conn,
            wait,
        )
        .await?;
        if let Some(report) = &sent.report {
            log_channel("sent", report);
        }
        // The channels' packet counts when they reported (they may have been stopped by the
        // client's answer before their last ACK).
        let packets = sent.report.as_ref().map_or((0, 0), |r| (r.data_pkts, r.retransmitted_pkts));
        let mut link =
            Link { setup: self.setup(), send: &mut *self.send, messages: Messages::new(self.recv) };
        let (reply, repaired, report) =
            repair::serve_repairs::<ServerMsg, _>(&mut link, &files, &data, compress, sent.reply)
                .await?;
        if let Some(report) = &report {
            log_channel("sent again", report);
            info!(blocks = repaired, "repaired");
            self.shared.metrics.repaired(repaired);
        }
        match (reply, sent.digests) {
            (ClientMsg::Verified, Some(_)) => {
                info!(files = count, size, "client verified the files");
                self.shared.metrics.moved(true, moving, packets.0, packets.1);
                Ok(())
            }
            (ClientMsg::Failed { code, message }, _) => {
                warn!(?code, message, "client could not take the files");
                Ok(())
            }
            (ClientMsg::Verified, None) => {
                Err(SessionError::Protocol("Verified before the digests were sent".into()))
            }
            (other, _) => Err(SessionError::Protocol(format!("expected Verified, got {other:?}"))),
        }
    }

    async fn put(
        &mut self,
        requested: &str,
        mut options: ReceiveOptions,
        dry_run: bool,
    ) -> Result<(), SessionError> {
        self.require(|r| r.write, "write (upload)")?;
        let _permit = self.acquire_transfer()?;
        let entries = recv_manifest(self.recv, self.conn, |msg| match msg {
            ClientMsg::Manifest(part) => Ok(part),
            ClientMsg::Failed { code, message } => Err(SessionError::from_client(code, message)),
            other => Err(SessionError::Protocol(format!("expected Manifest, got {other:?}"))),
        })
        .await?;
        debug!(entries = entries.len(), "manifest received");
        let _running = self.shared.metrics.transfer(false);
        let root = self.session.access.root.clone();
        options.confine = Some(root.clone());
        let req = requested.to_owned();
        let plan = blocking(move || {
            let dest = resolve(&root, if req.is_empty() { "." } else { &req })?;
            plan(&dest, entries, &options).map_err(plan_error)
        })
        .await?;
        if dry_run {
            let want = Want {
                files: to_ranges(plan.wanted().iter().copied()),
                replaced: plan.replaced,
                kept: plan.kept,
                resume: Vec::new(),
            };
            return self.write(&ServerMsg::Want(want)).await;
        }
        debug!(files = plan.wanted().len(), "planned");
        let want_files = to_ranges(plan.wanted().iter().copied());
        let (replaced, kept) = (plan.replaced, plan.kept);
        let incoming = blocking(move || plan.prepare().map_err(plan_error)).await?;
        let resume = resume_offers(incoming.offers());
        let offered = !resume.is_empty();
        self.write(&ServerMsg::Want(Want { files: want_files, replaced, kept, resume })).await?;
        let present = if offered {
            match read_message(self.recv, REPLY_TIMEOUT)
                .await
                .map_err(|e| frame_error(e, self.conn))?
            {
                ClientMsg::Resumed { kept } => {
                    incoming.present(&kept_pairs(&kept)?).map_err(SessionError::Protocol)?
                }
                ClientMsg::Failed { code, message } => {
                    return Err(SessionError::from_client(code, message));
                }
                other => {
                    return Err(SessionError::Protocol(format!("expected Resumed, got {other:?}")));
                }
            }
        } else {
            Vec::new()
        };
        let files = Arc::new(incoming.store());
        let size = files.total();
        let ends = files.ends();
        let count = ends.len();
        let moving = size - present.iter().map(|r| r.end - r.start).sum::<u64>();
        info!(path = requested, files = count, size, moving, "receiving");
        let params = match moving {
            0 => None,
            _ => Some(self.exchange_ready().await?),
        };

        let conn = self.conn;
        let wait = self.shared.digest_timeout.unwrap_or_else(|| hash_budget(size));
        let setup = self.setup();
        let mut messages = Messages::<ClientMsg>::new(self.recv);
        let mut keeper = incoming.keeper();
        let data = data_store(&files, self.shared.fault, false);
        let store = data.clone();
        let mut receiving = Receiving::spawn(move |hashed, cancel| {
            let mut progress = |p: datapath::Progress| keeper.update(p.prefix, false);
            let params = params.unwrap_or_default();
            let (range, progress) = (0..size, &mut progress);
            datapath::receive(params, &*store, range, &present, ends, progress, hashed, cancel)
        });
        let (arrival, early) =
            digest::run_receiving(&mut receiving, &mut messages, count, conn).await?;
        // Every byte is here and hashed: the answer need not wait for the channels' linger.
        let (hashes, mut report) = arrival.split();
        let expected = digest::await_digests(&mut messages, early, count, conn, wait).await?;
        if report.is_none() && hashes != expected {
            // A repair opens channels of its own: these end first.
            report = receiving.report().await;
        }
        let mut link = Link { setup, send: &mut *self.send, messages };
        let (actual, repaired) =
            repair::receive_repairs::<ServerMsg, _>(&mut link, &files, &data, &expected, hashes)
                .await?;
        drop(link);
        if repaired > 0 {
            info!(blocks = repaired, "repaired");
            self.shared.metrics.repaired(repaired);
        }
        let committed =
            blocking(move || incoming.commit(&expected, &actual).map_err(plan_error)).await?;
        if let Some(err) = mismatch_error(&committed) {
            return Err(err);
        }
        info!(
            path = requested,
            files = committed.files,
            links = committed.links,
            size,
            "stored and verified"
        );
        self.write(&ServerMsg::Verified).await?;
        if report.is_none() {
            report = receiving.report().await;
        }
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

/// Resolves a peer's path under the root; escapes are `refused`, a missing parent `not-found`.
fn resolve(root: &Path, requested: &str) -> Result<PathBuf, SessionError> {
    files::resolve_under_root(root, requested).map_err(|e| match e {
        PathError::Io(_, source) => open_error(requested, source),
        other => SessionError::Refused(other.to_string()),
    })
}

/// `message` with the server's own path of `root` taken out of every path in it, so that paths
/// read as the client names them (relative to the token's root).
fn unrooted(message: &str, root: &Path) -> String {
    let root = root.to_string_lossy();
    let within = format!("{}/", root.trim_end_matches('/'));
    message.replace(&within, "").replace(root.as_ref(), ".")
}

/// `not-found` for a missing file, `io` otherwise; names the requested path, never the server's
/// own layout.
fn open_error(requested: &str, e: std::io::Error) -> SessionError {
    if e.kind() == std::io::ErrorKind::NotFound {
        SessionError::NotFound(requested.to_owned())
    } else {
        SessionError::io(requested.to_owned(), e)
    }
}

fn mtime_secs(meta: &std::fs::Metadata) -> i64 {
    let Ok(modified) = meta.modified() else { return 0 };
    match modified.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_secs()).unwrap_or(i64::MAX),
    }
}
