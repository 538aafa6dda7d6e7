//! The requesting end: connects, checks the server's fingerprint, authenticates with its token,
//! and runs `Stat`, `Get` and `Put` requests (several may run at once on one [`Client`]).
//!
//! A download lands in temporary files beside their final names ([`crate::tree::Incoming`]),
//! each renamed there only after its BLAKE3 matched: a failed file leaves nothing under its
//! final name.

pub(crate) mod relay;
mod relayed_get;

pub use relay::CollectHop;
pub(crate) use relay::handshake_rtts;
pub use relayed_get::RelayedDownload;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluice_proto::config::ChannelConfig;
use tokio::sync::watch;
use tracing::{debug, info};

use super::add_checksums;
use super::channel::{
    ChannelSetup, HANDSHAKE_TIMEOUT, Negotiated, REPLY_TIMEOUT, blocking, control_transport,
    default_channel_config, fit_packet_size, frame_error,
};
use super::copy::{CopyOptions, local_walk_error};
use super::drive::{Channels, Destination, Wire, run_receiving, run_sending, write_opening};
use super::early::{EARLY_MAX_ENTRIES, EARLY_REQUEST, OFFER_WAIT, read_offer};
use super::identity::{CERT_NAME, Fingerprint, Identity};
use super::keys::{Role, SessionId};
use super::known_hosts::{HostDecision, HostVerifier, KnownHosts, TrustPolicy, host_key};
use super::manifest_io::recv_listing;
use super::messages::{
    Answer, ErrorCode, GrantClaim, JobDone, JobInfo, JobProgress, Offer, PullJob, Request, Spec,
    StatInfo, read_message, write_message,
};
use super::observe::{AnyObserver, CopyObserver, OnProgress, Watched};
use super::path_memory::PathMemory;
use super::retry::{Backoff, BusyRetry};
use super::streams::Opener;
use super::transport::{self, Connected, Transport, TransportChoice};
use super::{
    MAX_CHANNELS, PROTOCOL_VERSION, SessionError, auto_channels, close_code, connection_error,
};
use crate::datapath::{ChannelReport, Fault, MemoryStart, Progress};
use crate::tree::{Entry, Overwrite, ReceiveOptions, WalkOptions, walk};
use sluice_session::{Receiving, Sending, Timeouts, handshake};

/// QUIC idle timeout of the client's connection (the server's is longer, and the shorter
/// applies). The timeout restarts at each packet received and at the first packet sent after
/// one (RFC 9000 10.1); when the session is quiet that is the keep-alive, so a server that
/// vanished is noticed at most [`KEEP_ALIVE_INTERVAL`] plus this (8 s) after its last packet.
pub const CONNECTION_IDLE_TIMEOUT: Duration = Duration::from_secs(6);
/// How often the client keeps the connection alive while nothing else is sent.
pub const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(2);
/// Longest wait in [`Client::close`] for the close to leave this host.
const CLOSE_SEND_WAIT: Duration = Duration::from_millis(200);

/// Settings of a client.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The server's QUIC address.
    pub server: SocketAddr,
    /// The server's name as the user wrote it; the known-hosts key is `host:port`.
    pub host: String,
    /// The token the server accepts.
    pub token: String,
    /// The known-hosts file (created on the first pin).
    pub known_hosts: PathBuf,
    /// How to trust the server.
    pub trust: TrustPolicy,
    /// Data-channel settings: `packet_size`, `cc`, `rate_bps` and `aead` are proposed to the
    /// server; the others are local. `initial_dsn` and `seed` are replaced by derived values.
    pub channel: ChannelConfig,
    /// Data channels per transfer to offer (the server may lower it); `None` offers one per
    /// core ([`auto_channels`]).
    pub channels: Option<u32>,
    /// How to try again when the server turns the connection away because it is busy.
    pub busy_retry: BusyRetry,
    /// For tests of repair: a fault in this end's data path ([`Fault`]).
    #[doc(hidden)]
    pub fault: Option<Fault>,
    /// A certificate to prove to the server: a server reading for a third-party job proves
    /// its own identity, which the grant names.
    pub identity: Option<Arc<Identity>>,
    /// A grant presented in place of the token (a third-party job's read; `token` is then
    /// unused).
    pub grant: Option<GrantClaim>,
    /// The transport: `auto` (the default) races the QUIC handshakes over UDP and over TCP,
    /// UDP preferred ([`TransportChoice`]).
    pub transport: TransportChoice,
    /// Where uploads keep what each path delivered, to start the next near it
    /// ([`crate::session::path_memory`]); `None` (the default) starts every upload afresh.
    pub path_memory: Option<PathBuf>,
}

impl ClientConfig {
    /// Settings with [`default_channel_config`] for the data channels.
    pub fn new(
        server: SocketAddr,
        host: impl Into<String>,
        token: impl Into<String>,
        known_hosts: impl Into<PathBuf>,
        trust: TrustPolicy,
    ) -> ClientConfig {
        ClientConfig {
            server,
            host: host.into(),
            token: token.into(),
            known_hosts: known_hosts.into(),
            trust,
            channel: default_channel_config(),
            channels: None,
            busy_retry: BusyRetry::default(),
            fault: None,
            identity: None,
            grant: None,
            transport: TransportChoice::Auto,
            path_memory: None,
        }
    }
}

/// What a finished transfer did.
#[derive(Debug, Clone, Default)]
pub struct TransferReport {
    /// Files moved (or, in a dry run, that would move).
    pub files: u64,
    /// Bytes of those files.
    pub bytes: u64,
    /// Seconds from the request to the verified end.
    pub seconds: f64,
    /// BLAKE3 of the file, hex, when exactly one file moved.
    pub blake3: Option<String>,
    /// Existing files replaced (or that would be).
    pub replaced: u64,
    /// Existing files kept by the overwrite policy.
    pub kept: u64,
    /// Bytes an interrupted transfer had left at the receiver that were checked against the
    /// sender's blocks and kept: they did not move again.
    pub resumed: u64,
    /// What the sending end left out, and why (links skipped, special files, ...); only an
    /// upload knows.
    pub skipped: Vec<String>,
    /// A dry run's files that would move (manifest paths).
    pub planned: Vec<String>,
    /// Blocks of 4 MiB whose bytes did not match the sender's at the end and moved again
    /// (a disk or memory fault on either end, repaired).
    pub repaired: u64,
    /// This end's data channel report (`None` when no byte moved, or a sender stopped after
    /// the receiver confirmed).
    pub channel: Option<ChannelReport>,
    /// Whether the data started a round trip early, before the receiver's choice of files, and
    /// the receiver took it (a session's first upload to a server that offered sockets, a
    /// download to where nothing was).
    pub early: bool,
    /// The transport the data moved on.
    pub transport: Transport,
    /// The sending end started from what the path delivered to an earlier transfer (path
    /// memory): this end's for an upload, the server's for a download.
    pub path_memory: Option<MemoryStart>,
}

impl TransferReport {
    fn finished(mut self, started: Instant) -> TransferReport {
        self.seconds = started.elapsed().as_secs_f64();
        self
    }
}

/// A session with a server. Cloning shares the connection.
///
/// [`Client::connect`] returns once the server accepted the token; [`Client::start`] returns
/// as soon as `Hello` is sent, and the first request goes out behind it in the same round trip
/// (its answer waits for the server's `Welcome`, and a refusal is that request's error).
#[derive(Debug, Clone)]
pub struct Client {
    /// Held for the session's life: the endpoint's socket and driver carry the connection.
    _endpoint: quinn::Endpoint,
    conn: quinn::Connection,
    /// What the session runs on: over TCP, its data streams dial the server's TCP port.
    transport: Transport,
    /// Why `auto` chose TCP, once.
    notice: Option<String>,
    /// A transfer's UDP data channels got nothing through ([`Client::udp_data_blocked`]).
    udp_blocked: Arc<AtomicBool>,
    /// The verdicts of this session's downloads the server may not have read yet
    /// ([`Verdicts`]): what [`Client::close`] says in its close code.
    verdicts: Arc<Verdicts>,
    /// The server's answer to `Hello`, once it came ([`read_welcome`]).
    welcome: watch::Receiver<Option<Result<Welcomed, (ErrorCode, String)>>>,
    /// The server's offer for an early upload, once read (`Some(None)`: none came).
    offer: watch::Receiver<Option<Option<Offer>>>,
    /// What `Hello` proposed.
    proposal: Spec,
    channel: ChannelConfig,
    fault: Option<Fault>,
    fingerprint: Fingerprint,
    host_decision: HostDecision,
    memory: Option<Arc<PathMemory>>,
    /// Where this session's next relay hop starts sending (a deposit).
    hop_rate: Arc<super::relay::hop::HopRate>,
    /// What it was made from, for [`Client::again_over_tcp`].
    config: MadeFrom,
}

/// A session's settings, its token among them, kept for [`Client::again_over_tcp`]: shown as
/// nothing, so that no `{:?}` of a client shows its token.
#[derive(Clone)]
struct MadeFrom(Arc<ClientConfig>);

/// How long a third-party job's read waits for the source to end its request (and its grant)
/// after the files are verified.
const GRANT_END_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl std::fmt::Debug for MadeFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientConfig { .. }")
    }
}

impl Client {
    /// Connects, verifies the server's identity under the trust policy (pinning it in the
    /// known-hosts file on an accepted first contact), and authenticates with the token:
    /// [`Client::start`], then [`Client::ready`].
    pub async fn connect(config: ClientConfig) -> Result<Client, SessionError> {
        let client = Client::start(config).await?;
        client.ready().await?;
        Ok(client)
    }

    /// Connects and verifies the server's identity as [`Client::connect`] does, and sends the
    /// token without waiting for the answer: the session's first request follows at once, and
    /// each request waits for the answer before it reads its own (a refused token is the first
    /// request's error). This saves the round trip of the handshake: on a 300 ms path, 0.3 s of
    /// every command.
    pub async fn start(mut config: ClientConfig) -> Result<Client, SessionError> {
        config.channel.validate().map_err(|e| SessionError::Config(e.to_string()))?;
        config.channel.packet_size = fit_packet_size(config.channel.packet_size, config.server);
        if let Some(n) = config.channels.filter(|n| !(1..=MAX_CHANNELS).contains(n)) {
            return Err(SessionError::Config(format!(
                "{n} channels asked for: between 1 and {MAX_CHANNELS} are possible"
            )));
        }
        let known = KnownHosts::load(&config.known_hosts)?;
        let host = host_key(&config.host, config.server.port());
        let verifier = HostVerifier::new(config.trust.clone(), known, host.clone());

        let mut transport = control_transport();
        let idle = quinn::IdleTimeout::try_from(CONNECTION_IDLE_TIMEOUT)
            .map_err(|_| SessionError::Config("idle timeout out of range".into()))?;
        transport
            .max_idle_timeout(Some(idle))
            .keep_alive_interval(Some(KEEP_ALIVE_INTERVAL))
            .max_concurrent_bidi_streams(0u32.into())
            // The server's one stream: its offer ([`read_offer`]).
            .max_concurrent_uni_streams(1u32.into());
        let tls = verifier.client_tls_as(config.identity.as_deref())?;
        let mut quic = quinn::ClientConfig::new(Arc::new(tls));
        quic.transport_config(Arc::new(transport));

        let Connected { endpoint, conn, transport, notice } =
            transport::connect(config.transport, config.server, |endpoint, over| {
                let (quic, config, host, verifier) = (&quic, &config, &host, &verifier);
                async move {
                    let conn =
                        connect_retrying(&endpoint, over, quic, config, host, verifier).await?;
                    Ok((endpoint, conn))
                }
            })
            .await?;
        let (fingerprint, host_decision) = match verifier.outcome() {
            Some((fingerprint, Ok(decision))) => (fingerprint, decision),
            Some((_, Err(refused))) => return Err(refused.into()),
            None => return Err(SessionError::Protocol("the server sent no certificate".into())),
        };
        if host_decision == HostDecision::New {
            KnownHosts::append(&config.known_hosts, &host, &fingerprint)?;
            info!(%host, %fingerprint, file = %config.known_hosts.display(), "pinned a new host");
        }

        let (offered_tx, offer) = watch::channel(None);
        let reading = conn.clone();
        tokio::spawn(async move {
            let _ = offered_tx.send(Some(read_offer(&reading).await));
        });
        let channels = config.channels.unwrap_or_else(|| match transport {
            Transport::Udp => auto_channels(),
            Transport::Tcp => transport::TCP_STREAMS_MAX,
        });
        let mut proposal = Negotiated::proposal(&config.channel, channels);
        // Over TCP a count the user did not fix is a ceiling the sender grows into.
        proposal.grow_streams = transport == Transport::Tcp && config.channels.is_none();
        let recv = send_hello(&conn, &config.token, config.grant.as_ref(), &proposal)
            .await
            .inspect_err(|_| {
                conn.close(close_code::DONE.into(), b"handshake failed");
            })?;
        let (answer, welcome) = watch::channel(None);
        tokio::spawn(read_welcome(conn.clone(), recv, proposal.clone(), host, answer));
        Ok(Client {
            _endpoint: endpoint,
            conn,
            transport,
            notice,
            udp_blocked: Arc::default(),
            verdicts: Arc::default(),
            welcome,
            offer,
            proposal,
            channel: config.channel.clone(),
            fault: config.fault,
            fingerprint,
            host_decision,
            memory: config.path_memory.clone().map(|file| Arc::new(PathMemory::at(file))),
            hop_rate: Arc::default(),
            config: MadeFrom(Arc::new(config)),
        })
    }

    /// The transport the session runs on.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// Why the session runs on TCP when `auto` chose it (UDP did not get through), to tell the
    /// user once.
    pub fn transport_notice(&self) -> Option<&str> {
        self.notice.as_deref()
    }

    /// Whether a transfer of this session failed because its UDP data channels got nothing
    /// through while the session itself got through (this end's channels saw nothing from
    /// their start, or the copy failed on the network before any byte moved): a path that
    /// carries only the server's port. The transfer can be taken up with
    /// [`TransportChoice::Tcp`].
    pub fn udp_data_blocked(&self) -> bool {
        self.udp_blocked.load(Ordering::Relaxed)
    }

    /// A new session with the same server, as this one was made but over TCP, holding the
    /// server to the certificate this one saw: for a path where this session's UDP data
    /// channels got nothing through ([`Client::udp_data_blocked`]).
    pub async fn again_over_tcp(&self) -> Result<Client, SessionError> {
        let mut config = (*self.config.0).clone();
        config.transport = TransportChoice::Tcp;
        config.trust = TrustPolicy::Pinned(self.fingerprint.clone());
        Client::connect(config).await
    }

    /// Over TCP, how this end gets a transfer's data streams: it dials the server's port.
    fn streams_opener(&self) -> Option<Opener<'static>> {
        (self.transport == Transport::Tcp).then(|| Opener::Dial(self.conn.remote_address()))
    }

    /// The fingerprint the server presented.
    pub fn server_fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    /// The server's address, as this end reached it.
    pub fn server_address(&self) -> SocketAddr {
        self.conn.remote_address()
    }

    /// Whether the session has ended (closed by either end, or its connection lost): a
    /// holder that keeps sessions opens a new one in its place.
    pub fn is_closed(&self) -> bool {
        self.conn.close_reason().is_some()
    }

    /// Why the server was trusted.
    pub fn host_decision(&self) -> HostDecision {
        self.host_decision
    }

    /// Waits for the server's answer to the token: `Ok` once the session is open.
    pub async fn ready(&self) -> Result<(), SessionError> {
        self.welcomed().await.map(|_| ())
    }

    /// The session's id (chosen by the server; waits for its answer to the token).
    pub async fn session_id(&self) -> Result<SessionId, SessionError> {
        Ok(self.welcomed().await?.session_id)
    }

    /// Data channels per transfer agreed in the handshake (waits for the server's answer).
    pub async fn channels(&self) -> Result<u32, SessionError> {
        Ok(self.welcomed().await?.negotiated.channels)
    }

    /// The server's `Welcome`, or why there is none. Everything a request reads from the
    /// server comes after it (the server reads no request before it accepted the token).
    async fn welcomed(&self) -> Result<Welcomed, SessionError> {
        let mut welcome = self.welcome.clone();
        let answer = match welcome.wait_for(Option::is_some).await {
            Ok(answer) => answer.clone(),
            Err(_) => None,
        };
        match answer {
            Some(Ok(welcomed)) => Ok(welcomed),
            Some(Err((code, message))) => Err(SessionError::from_server(code, message)),
            None => Err(SessionError::Network("the handshake ended without an answer".into())),
        }
    }

    /// `err`, a request's failure before the server's `Welcome` was read; or the server's
    /// refusal of the token when there was one, which is why the request failed.
    async fn refusal_or(&self, err: SessionError) -> SessionError {
        self.welcomed().await.err().unwrap_or(err)
    }

    /// After a request's opening messages (`sent`): the server's `Welcome`, before anything of
    /// the request's answer is read; a refused token is the request's error, also when the
    /// refusal is what made the sending fail.
    async fn opened(&self, sent: Result<(), SessionError>) -> Result<Welcomed, SessionError> {
        match sent {
            Ok(()) => self.welcomed().await,
            Err(err) => Err(self.refusal_or(err).await),
        }
    }

    /// Closes the session: returns once the close has left this host (at most
    /// [`CLOSE_SEND_WAIT`]). After a download whose `Verified` the server may not have read yet
    /// (a download returns once it is written: the server's end of the request would come a
    /// round trip later), the close's code says the same ([`close_code::VERIFIED`]), so the
    /// verdict reaches the server if either packet does.
    ///
    /// It does not wait out QUIC's draining period (three probe timeouts, `Endpoint::wait_idle`):
    /// everything was answered already, and that wait only re-sends the close to a server that
    /// lost it. It cost 0.42 s at the end of every command on a 100 ms path, and the whole 1 s
    /// it was allowed on a 300 ms path. A server whose close was lost ends the session at its
    /// idle timeout.
    pub async fn close(self) {
        let sent_before = self.conn.stats().udp_tx.datagrams;
        match self.verdicts.unread_verified() {
            true => self.conn.close(close_code::VERIFIED.into(), b"verified"),
            false => self.conn.close(close_code::DONE.into(), b"done"),
        }
        // The connection's driver builds the close packet and hands it to the socket while it
        // holds the connection's state, which `stats` waits for: a datagram counted after the
        // close has been given to the socket (a closed connection sends nothing else).
        let _ = tokio::time::timeout(CLOSE_SEND_WAIT, async {
            while self.conn.stats().udp_tx.datagrams == sent_before {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
    }

    /// Sends `request` on a new request stream and reads its one answer.
    async fn ask(&self, request: &Request) -> Result<Answer, SessionError> {
        let mut req = self.request().await?;
        self.opened(req.write(request).await).await?;
        req.read_answer(REPLY_TIMEOUT).await
    }

    /// Size, modification time and kind of `path` on the server.
    pub async fn stat(&self, path: &str) -> Result<StatInfo, SessionError> {
        match self.ask(&Request::Stat { path: path.to_owned() }).await? {
            Answer::StatInfo(info) => Ok(info),
            other => Err(unexpected(other)),
        }
    }

    /// This token's jobs on the server (third-party pulls and relayed uploads' collections):
    /// running and stalled first, then those that ended lately. Needs the `write` right.
    pub async fn jobs(&self) -> Result<Vec<JobInfo>, SessionError> {
        match self.ask(&Request::Jobs {}).await? {
            Answer::Jobs { jobs } => Ok(jobs),
            other => Err(unexpected(other)),
        }
    }

    /// Cancels this token's job `id` on the server (running or stalled) and returns its
    /// listing once it ended (or as it stands, when it took longer than the server waits).
    /// A third-party job's files stay as an interrupted download leaves them; a relayed
    /// upload's collected blocks are deleted.
    pub async fn cancel_job(&self, id: &str) -> Result<Vec<JobInfo>, SessionError> {
        match self.ask(&Request::CancelJob { id: id.to_owned() }).await? {
            Answer::Jobs { jobs } => Ok(jobs),
            other => Err(unexpected(other)),
        }
    }

    /// The entries of the directory `path` on the server (one level, sorted by name; each
    /// entry's path is its name), or the file `path` itself. Links are listed, not followed.
    pub async fn list(&self, path: &str) -> Result<Vec<Entry>, SessionError> {
        let mut req = self.request().await?;
        self.opened(req.write(&Request::List { path: path.to_owned() }).await).await?;
        recv_listing(&mut req.recv, &self.conn).await
    }

    /// Asks this server (a third-party transfer's source) for a grant: the server whose
    /// certificate has fingerprint `reader` may read `paths` (under this token's root) for one
    /// job. Needs the token's `read` right and the server's consent to third-party reads.
    pub async fn grant(
        &self,
        reader: &Fingerprint,
        paths: &[String],
    ) -> Result<Granted, SessionError> {
        let ask = Request::Grant { reader: reader.to_string(), paths: paths.to_vec() };
        match self.ask(&ask).await? {
            Answer::Granted { grant, job, expires_at } => Ok(Granted { grant, job, expires_at }),
            other => Err(unexpected(other)),
        }
    }

    /// Asks this server (a third-party transfer's destination) to read `job.paths` from the
    /// source with the grant, into `job.dest`; calls `progress` as it reports. The job goes on
    /// when this session ends; asking again for the same source, paths and destination while
    /// it runs follows it instead of starting another.
    pub async fn pull(
        &self,
        job: PullJob,
        mut progress: impl FnMut(JobProgress) + Send,
    ) -> Result<JobDone, SessionError> {
        self.pull_reporting(job, &mut progress).await
    }

    /// [`Client::pull`], compiled once whatever the callback.
    async fn pull_reporting(
        &self,
        job: PullJob,
        progress: &mut (dyn FnMut(JobProgress) + Send),
    ) -> Result<JobDone, SessionError> {
        let mut req = self.request().await?;
        self.opened(req.write(&Request::Pull(job)).await).await?;
        loop {
            // The job reports at least every few seconds while it runs; the long wait covers a
            // source that is slow to plan a large tree.
            match req.read_answer(JOB_REPORT_TIMEOUT).await? {
                Answer::JobProgress(p) => progress(p),
                Answer::JobDone(done) => {
                    req.finish();
                    return Ok(done);
                }
                other => return Err(unexpected(other)),
            }
        }
    }

    /// Downloads the one file `remote_path` to `local_path` (replacing a file there), calling
    /// `progress` as bytes arrive: [`Client::download`] of one file with
    /// [`Overwrite::Always`]. The file is written beside `local_path` and renamed onto it only
    /// once its BLAKE3 matched.
    pub async fn get(
        &self,
        remote_path: &str,
        local_path: &Path,
        progress: impl FnMut(Progress) + Send + 'static,
    ) -> Result<TransferReport, SessionError> {
        let options = CopyOptions { overwrite: Overwrite::Always, ..CopyOptions::default() };
        self.download(&[remote_path.to_owned()], local_path, &options, progress).await
    }

    /// Uploads the one file `local_path` to `remote_path` (replacing a file there; its parent
    /// directory must exist on the server): [`Client::upload`] of one file with
    /// [`Overwrite::Always`]. Succeeds once the server verified and stored the file.
    pub async fn put(
        &self,
        local_path: &Path,
        remote_path: &str,
        progress: impl FnMut(Progress) + Send + 'static,
    ) -> Result<TransferReport, SessionError> {
        let options = CopyOptions { overwrite: Overwrite::Always, ..CopyOptions::default() };
        self.upload(&[local_path.to_owned()], remote_path, &options, progress).await
    }

    /// Downloads `remote_paths` (files, or with `options.recursive` whole trees) to `dest`:
    /// into it when it is a directory, else onto it (one source only). Calls `progress` as
    /// bytes arrive. Each file lands beside its final name and is renamed there only once its
    /// BLAKE3 matched the server's.
    pub async fn download(
        &self,
        remote_paths: &[String],
        dest: &Path,
        options: &CopyOptions,
        progress: impl FnMut(Progress) + Send + 'static,
    ) -> Result<TransferReport, SessionError> {
        self.download_observed(remote_paths, dest, options, OnProgress(progress)).await
    }

    /// [`Client::download`], telling `observer` the files that will move and the progress.
    pub async fn download_observed(
        &self,
        remote_paths: &[String],
        dest: &Path,
        options: &CopyOptions,
        observer: impl CopyObserver,
    ) -> Result<TransferReport, SessionError> {
        self.download_confined(remote_paths, dest, options, None, Box::new(observer)).await
    }

    /// [`Client::download_observed`], writing only beneath `confine` when given (a server
    /// that downloads for a third-party job keeps within the job's token's root, as for an
    /// upload to it).
    pub(crate) async fn download_confined(
        &self,
        remote_paths: &[String],
        dest: &Path,
        options: &CopyOptions,
        confine: Option<PathBuf>,
        observer: AnyObserver,
    ) -> Result<TransferReport, SessionError> {
        let (observer, moved) = Watched::watch(observer);
        let result = self.download_watched(remote_paths, dest, options, confine, observer).await;
        self.judge_data_path(&result, &moved);
        result
    }

    async fn download_watched(
        &self,
        remote_paths: &[String],
        dest: &Path,
        options: &CopyOptions,
        confine: Option<PathBuf>,
        mut observer: AnyObserver,
    ) -> Result<TransferReport, SessionError> {
        let started = Instant::now();
        options.check()?;
        let mut req = self.request().await?;
        // Where nothing is yet, the server may send right behind its manifest, to sockets
        // that listen already.
        // Over TCP the client dials the data streams when the server starts: no sockets.
        let over_udp = self.transport == Transport::Udp;
        let early = match over_udp && !options.dry_run && nothing_at(dest, remote_paths) {
            true => Some(self.bind_data(self.proposal.max_channels)?),
            false => None,
        };
        let get = Request::Get {
            paths: remote_paths.to_vec(),
            recursive: options.recursive,
            links: options.links,
            checksum: options.checksum,
            compress: options.compress,
            udp_ports: early.as_ref().map(|(_, ports)| ports.clone()).unwrap_or_default(),
        };
        let welcomed = self.opened(req.write(&get).await).await?;
        let early = early.map(|(mut sockets, _)| {
            sockets.truncate(welcomed.negotiated.channels as usize);
            sockets
        });
        observer.channels(welcomed.negotiated.channels);
        let destination = Destination {
            dest: dest.to_owned(),
            options: ReceiveOptions {
                overwrite: options.overwrite,
                checksum: options.checksum,
                preserve: options.preserve,
                confine,
                adopt: None,
            },
            dry_run: options.dry_run,
            early: None,
        };
        let channels = Channels {
            setup: self.setup(req.id, welcomed),
            fault: self.fault,
            memory: self.memory.clone(),
            carrier: None,
        };
        let machine = match early.is_some() {
            true => Receiving::new_early(Instant::now(), Timeouts::default(), true),
            false => Receiving::new(Instant::now(), Timeouts::default()),
        };
        let destination = Destination { early, ..destination };
        let mut wire = Wire::new(&self.conn, &mut req.send, &mut req.recv);
        let received =
            run_receiving(machine, &mut wire, &channels, destination, Some(observer)).await;
        drop(wire);
        let mut received = received.inspect_err(|_| self.verdicts.failed())?;
        let mut report = TransferReport {
            files: received.files,
            replaced: received.replaced,
            kept: received.kept,
            planned: std::mem::take(&mut received.planned),
            ..TransferReport::default()
        };
        req.finish();
        if options.dry_run {
            report.bytes = received.size;
            return Ok(report.finished(started));
        }
        // The files are verified and stored, and `Verified` is written: the download is done.
        // The server's end of the request would come a round trip later; it is not waited
        // for. Should the connection close before `Verified` leaves, the close says it
        // ([`Client::close`]). UDP channels linger until then too, for the sender's shutdown:
        // they end now, each acknowledging what it has once more. TCP streams end at the
        // sender's shutdown, which follows the confirmation of their last bytes (a stream
        // closed before it has sent that would leave the sender short of it).
        self.verdicts.verified();
        let channel = match (received.lingering.as_mut(), self.transport) {
            (Some(lingering), Transport::Udp) => lingering.end().await,
            (Some(lingering), Transport::Tcp) => lingering.report().await,
            (None, _) => received.report.take(),
        };
        if self.config.0.grant.is_some() {
            // A third-party job's read: the source ends its grant once it has heard `Verified`,
            // then ends the request. Waited for (a round trip), the grant has ended when the
            // job reports done: a second job with it is refused, not raced.
            let _ = tokio::time::timeout(GRANT_END_WAIT, req.recv.read_to_end(64 << 10)).await;
        }
        let digests = &received.received.digests;
        info!(
            ?remote_paths,
            files = digests.len(),
            size = received.size,
            "downloaded and verified"
        );
        report.bytes = received.size;
        report.blake3 = (digests.len() == 1).then(|| digests[0].to_hex().to_string());
        report.channel = channel.filter(|c| c.channels > 0);
        report.early = received.early;
        report.transport = self.transport;
        report.repaired = received.received.repaired;
        report.resumed = received.received.resumed;
        report.path_memory = received
            .received
            .path_memory
            .map(|p| MemoryStart { rate_bps: p.rate_bps, age: Duration::from_secs(p.age_s) });
        Ok(report.finished(started))
    }

    /// Uploads `local_paths` (files, or with `options.recursive` whole trees) to `dest` on the
    /// server: into it when it is a directory, else onto it (one source only). Calls
    /// `progress` as bytes are acknowledged. Succeeds once the server verified and stored
    /// every file.
    pub async fn upload(
        &self,
        local_paths: &[PathBuf],
        dest: &str,
        options: &CopyOptions,
        progress: impl FnMut(Progress) + Send + 'static,
    ) -> Result<TransferReport, SessionError> {
        self.upload_observed(local_paths, dest, options, OnProgress(progress)).await
    }

    /// [`Client::upload`], telling `observer` the files that will move and the progress.
    pub async fn upload_observed(
        &self,
        local_paths: &[PathBuf],
        dest: &str,
        options: &CopyOptions,
        observer: impl CopyObserver,
    ) -> Result<TransferReport, SessionError> {
        let (observer, moved) = Watched::watch(Box::new(observer));
        let result = self.upload_watched(local_paths, dest, options, observer).await;
        self.judge_data_path(&result, &moved);
        result
    }

    /// A copy over UDP that failed on the network before any byte moved met a path that
    /// carries the session but not its data channels ([`Client::udp_data_blocked`]), whichever
    /// end noticed first.
    fn judge_data_path(
        &self,
        result: &Result<TransferReport, SessionError>,
        moved: &std::sync::atomic::AtomicBool,
    ) {
        let failed = matches!(result, Err(SessionError::Network(_)));
        if failed && self.transport == Transport::Udp && !moved.load(Ordering::Relaxed) {
            self.udp_blocked.store(true, Ordering::Relaxed);
        }
    }

    async fn upload_watched(
        &self,
        local_paths: &[PathBuf],
        dest: &str,
        options: &CopyOptions,
        mut observer: AnyObserver,
    ) -> Result<TransferReport, SessionError> {
        let started = Instant::now();
        options.check()?;
        let sources = local_paths.to_vec();
        let walk_options =
            WalkOptions { recursive: options.recursive, links: options.links, confine: None };
        let checksum = options.checksum;
        let outgoing = blocking(move || {
            let mut outgoing = walk(&sources, &walk_options).map_err(local_walk_error)?;
            if checksum {
                add_checksums(&mut outgoing)?;
            }
            Ok(outgoing)
        })
        .await?;
        let mut req = self.request().await?;
        let early = match options.dry_run || outgoing.entries.len() > EARLY_MAX_ENTRIES {
            true => None,
            false => self.early_upload(&req).await?,
        };
        let put = Request::Put {
            dest: dest.to_owned(),
            overwrite: options.overwrite,
            checksum: options.checksum,
            preserve: options.preserve,
            dry_run: options.dry_run,
            early: early.is_some(),
        };
        let compress = options.compress;
        let sent = if let Some((offered, ports)) = early {
            // The data goes with the request, under the session the server offered; the
            // server's answer to the token comes meanwhile.
            let machine =
                Sending::new_early(Instant::now(), &outgoing.entries, Timeouts::default(), ports);
            observer.channels(offered.negotiated.channels);
            let channels = Channels {
                setup: self.setup(req.id, offered),
                fault: self.fault,
                memory: self.memory.clone(),
                carrier: None,
            };
            let sent = match req.write(&put).await {
                Ok(()) => {
                    let mut wire = Wire::new(&self.conn, &mut req.send, &mut req.recv);
                    let observer = Some(observer);
                    run_sending(machine, &mut wire, &channels, &outgoing, compress, observer).await
                }
                Err(err) => Err(err),
            };
            let sent = match sent {
                Ok(sent) => sent,
                Err(err) => return Err(self.refusal_or(err).await),
            };
            let welcomed = self.welcomed().await?;
            if (welcomed.session_id, welcomed.negotiated)
                != (offered.session_id, offered.negotiated)
            {
                return Err(SessionError::Protocol(
                    "the server's Welcome does not match its offer".into(),
                ));
            }
            sent
        } else {
            let mut machine = Sending::new(Instant::now(), &outgoing.entries, Timeouts::default());
            // The manifest follows the request before the server's answer to the token is
            // known.
            let sent = match req.write(&put).await {
                Ok(()) => {
                    let mut wire = Wire::new(&self.conn, &mut req.send, &mut req.recv);
                    write_opening(&mut machine, &mut wire).await
                }
                Err(err) => Err(err),
            };
            let welcomed = self.opened(sent).await?;
            observer.channels(welcomed.negotiated.channels);
            let channels = Channels {
                setup: self.setup(req.id, welcomed),
                fault: self.fault,
                memory: self.memory.clone(),
                carrier: None,
            };
            let mut wire = Wire::new(&self.conn, &mut req.send, &mut req.recv);
            let sent =
                run_sending(machine, &mut wire, &channels, &outgoing, compress, Some(observer))
                    .await;
            drop(wire);
            sent?
        };
        let names = super::drive::wanted_names(&outgoing, &sent.wanted);
        let mut report = TransferReport {
            files: sent.wanted.len() as u64,
            replaced: sent.replaced,
            kept: sent.kept,
            skipped: outgoing.skipped.clone(),
            ..TransferReport::default()
        };
        req.finish();
        if options.dry_run {
            report.planned = names;
            report.bytes = sent.size;
            return Ok(report.finished(started));
        }
        let digests = &sent.sent.digests;
        info!(dest, files = report.files, size = sent.size, "uploaded and verified by the server");
        report.bytes = sent.size;
        report.resumed = sent.size - sent.sent.moved;
        report.blake3 = (digests.len() == 1).then(|| digests[0].to_hex().to_string());
        report.path_memory = sent.report.as_ref().and_then(|c| c.memory_start);
        report.channel = sent.report;
        report.early = sent.early;
        report.transport = self.transport;
        report.repaired = sent.sent.repaired;
        Ok(report.finished(started))
    }

    /// For the session's first request, an upload: the server's offer of sockets for an early
    /// start, as the session it stands for and the ports to send to (as many as the session's
    /// channels). `None` when there is none (a later request, no offer, or none in time).
    async fn early_upload(
        &self,
        req: &OpenRequest<'_>,
    ) -> Result<Option<(Welcomed, Vec<u16>)>, SessionError> {
        if req.send.id().index() != EARLY_REQUEST {
            return Ok(None);
        }
        let mut offer = self.offer.clone();
        let offer = match tokio::time::timeout(OFFER_WAIT, offer.wait_for(Option::is_some)).await {
            Ok(Ok(offer)) => offer.clone().flatten(),
            _ => None,
        };
        let Some(offer) = offer else { return Ok(None) };
        let Some((id, negotiated, ports)) =
            handshake::early_start(&offer, &self.proposal).map_err(handshake_error)?
        else {
            return Ok(None);
        };
        let session_id = SessionId::from_hex(&id)
            .ok_or_else(|| SessionError::Protocol(format!("bad session id {id:?} in the offer")))?;
        Ok(Some((Welcomed { session_id, negotiated }, ports)))
    }

    /// `count` data sockets on this end of the connection, with their ports.
    fn bind_data(&self, count: u32) -> Result<(Vec<std::net::UdpSocket>, Vec<u16>), SessionError> {
        let local = self.conn.local_ip().map(|ip| ip.to_canonical());
        super::channel::bind_data_sockets(
            count,
            local,
            self.conn.remote_address().ip().to_canonical(),
            crate::datapath::SOCKET_BUFFER_BYTES,
        )
    }

    async fn request(&self) -> Result<OpenRequest<'_>, SessionError> {
        let (send, recv) = match self.conn.open_bi().await {
            Ok(streams) => streams,
            Err(e) => return Err(self.refusal_or(connection_error(&e)).await),
        };
        Ok(OpenRequest { conn: &self.conn, id: u64::from(send.id()), send, recv })
    }

    fn setup(&self, request_id: u64, welcomed: Welcomed) -> ChannelSetup<'_> {
        ChannelSetup {
            conn: &self.conn,
            role: Role::Client,
            session_id: welcomed.session_id,
            negotiated: welcomed.negotiated,
            base: &self.channel,
            request_id,
            phase: 0,
            streams: self.streams_opener(),
            udp_blocked: Some(&self.udp_blocked),
        }
    }
}

/// The QUIC connection to the server. A server that turns it away because it is busy is asked
/// again after a wait, as `config.busy_retry` says (each wait logged); when it still turns it
/// away the error is [`SessionError::Busy`].
async fn connect_retrying(
    endpoint: &quinn::Endpoint,
    over: Transport,
    quic: &quinn::ClientConfig,
    config: &ClientConfig,
    host: &str,
    verifier: &HostVerifier,
) -> Result<quinn::Connection, SessionError> {
    let server = config.server;
    let started = Instant::now();
    let mut backoff = Backoff::new(config.busy_retry);
    loop {
        // On the wall clock, for the bench's time to the first data byte (`first data`).
        let unix_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        debug!(%server, unix_us, "connecting");
        let connecting = endpoint
            .connect_with(quic.clone(), server, CERT_NAME)
            .map_err(|e| SessionError::Config(format!("connecting to {server}: {e}")))?;
        let err = match connecting.await {
            Ok(conn) => return Ok(conn),
            Err(e) => e,
        };
        if let Some((_, Err(refused))) = verifier.outcome() {
            return Err(refused.into());
        }
        match (connection_error(&err), over) {
            (SessionError::Busy(_), _) => {}
            // Over TCP the connection was made (the tunnel dials first): the handshake's
            // datagrams went into it and nothing came back.
            (_, Transport::Tcp) if matches!(err, quinn::ConnectionError::TimedOut) => {
                return Err(SessionError::Network(format!(
                    "could not connect to {server} ({host}) over TCP: the TCP connection was \
                     made, but the session's handshake got no answer through it (the server \
                     stopped answering, or the path drops full-size packets: an MTU black hole)"
                )));
            }
            (other, _) => {
                return Err(SessionError::Network(format!(
                    "could not connect to {server} ({host}): {}",
                    other.detail()
                )));
            }
        };
        let attempts = backoff.waits() + 1;
        let Some(wait) = backoff.next_wait(started.elapsed()) else {
            let times = match attempts {
                1 => String::new(),
                n => format!(" {n} times in {:.1} s", started.elapsed().as_secs_f64()),
            };
            return Err(SessionError::Busy(format!(
                "the server {server} ({host}) turned the connection away{times}: it is at its \
                 limit of sessions, or of connections being set up; try again later"
            )));
        };
        info!(
            %host,
            attempt = attempts,
            wait_ms = wait.as_millis() as u64,
            "server busy (it turned the connection away): trying again after a wait"
        );
        tokio::time::sleep(wait).await;
    }
}

/// What the server's `Welcome` settled for the session.
#[derive(Debug, Clone, Copy)]
struct Welcomed {
    session_id: SessionId,
    negotiated: Negotiated,
}

/// Sends `Hello` on the handshake stream and returns that stream's receiving half.
async fn send_hello(
    conn: &quinn::Connection,
    token: &str,
    grant: Option<&GrantClaim>,
    proposal: &Spec,
) -> Result<quinn::RecvStream, SessionError> {
    let (mut send, recv) = conn.open_bi().await.map_err(|e| connection_error(&e))?;
    let hello = Request::Hello {
        version: PROTOCOL_VERSION,
        token: if grant.is_some() { String::new() } else { token.to_owned() },
        spec: proposal.clone(),
        grant: grant.cloned(),
    };
    write_message(&mut send, &hello).await.map_err(|e| frame_error(e, conn))?;
    let _ = send.finish();
    Ok(recv)
}

/// Reads the answer to `Hello` (`Welcome` or `Refused`) and publishes it to the session's
/// requests; closes the connection when there is no session. A task of its own, so a request
/// dropped while it waits cannot lose the answer for the others.
async fn read_welcome(
    conn: quinn::Connection,
    mut recv: quinn::RecvStream,
    proposal: Spec,
    host: String,
    answer: watch::Sender<Option<Result<Welcomed, (ErrorCode, String)>>>,
) {
    let welcomed = async {
        let answer =
            read_message(&mut recv, HANDSHAKE_TIMEOUT).await.map_err(|e| frame_error(e, &conn))?;
        let (session_id, negotiated) =
            handshake::welcome(answer, &proposal).map_err(handshake_error)?;
        let id = SessionId::from_hex(&session_id).ok_or_else(|| {
            SessionError::Protocol(format!("bad session id {session_id:?} in Welcome"))
        })?;
        Ok::<_, SessionError>(Welcomed { session_id: id, negotiated })
    }
    .await;
    match &welcomed {
        Ok(w) => {
            info!(%host, session_id = %w.session_id, channels = w.negotiated.channels, "session open")
        }
        Err(err) => {
            debug!(%host, error = %err, "handshake failed");
            conn.close(close_code::DONE.into(), b"handshake failed");
        }
    }
    let _ = answer.send(Some(welcomed.map_err(|e| (e.code(), e.detail()))));
}

/// One request's streams.
struct OpenRequest<'a> {
    conn: &'a quinn::Connection,
    id: u64,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
}

impl OpenRequest<'_> {
    async fn write(&mut self, msg: &Request) -> Result<(), SessionError> {
        write_message(&mut self.send, msg).await.map_err(|e| frame_error(e, self.conn))
    }

    /// The server's answer to a `Stat`; its `Failed` is the error.
    async fn read_answer(&mut self, deadline: Duration) -> Result<Answer, SessionError> {
        let msg =
            read_message(&mut self.recv, deadline).await.map_err(|e| frame_error(e, self.conn))?;
        match msg {
            Answer::Failed { code, message } => Err(SessionError::from_server(code, message)),
            other => Ok(other),
        }
    }

    fn finish(&mut self) {
        let _ = self.send.finish();
    }

    /// Its streams, for a request whose messages are not `Answer`s (the relay plane's).
    fn into_parts(self) -> relay::OpenRequestParts {
        relay::OpenRequestParts { send: self.send, recv: self.recv }
    }
}

/// How long a client waits between a third-party job's reports before it gives up following
/// it (the job itself goes on).
const JOB_REPORT_TIMEOUT: Duration = Duration::from_secs(120);

/// A source server's grant for a third-party job ([`Client::grant`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    /// The grant, as the reader presents it.
    pub grant: String,
    /// The job it is for.
    pub job: String,
    /// When it expires, seconds since the Unix epoch (the source's clock).
    pub expires_at: u64,
}

/// What a session's downloads answered that the server may not have read: a download
/// returns once its `Verified` is written, and [`Client::close`] repeats it in the close's
/// code. Only while no download of the session failed: its `Failed` may be unread too, and the
/// close must not say otherwise.
#[derive(Debug, Default)]
struct Verdicts {
    /// 0: none; [`Verdicts::VERIFIED`]: verified; [`Verdicts::FAILED`]: one failed.
    state: std::sync::atomic::AtomicU8,
}

impl Verdicts {
    const VERIFIED: u8 = 1;
    const FAILED: u8 = 2;

    /// A download verified its files and wrote `Verified`.
    fn verified(&self) {
        let _ = self.state.compare_exchange(0, Self::VERIFIED, Ordering::AcqRel, Ordering::Acquire);
    }

    /// A download failed.
    fn failed(&self) {
        self.state.store(Self::FAILED, Ordering::Release);
    }

    /// Whether the close may say "verified".
    fn unread_verified(&self) -> bool {
        self.state.load(Ordering::Acquire) == Self::VERIFIED
    }
}

/// What a fault of the handshake means to the user: the server's words, or a protocol error.
fn handshake_error(fault: sluice_session::Fault) -> SessionError {
    match fault {
        sluice_session::Fault::Peer { code, message } => SessionError::from_server(code, message),
        sluice_session::Fault::Protocol(message) => SessionError::Protocol(message),
        other => SessionError::Protocol(format!("{other:?}")),
    }
}

/// Whether a download of `remote_paths` to `dest` finds nothing there to resume or compare:
/// `dest` does not exist, or is a directory without an entry of any source's name. (A file
/// left by an interrupted transfer beside its name is found only by the plan, which then
/// declines the early start.)
fn nothing_at(dest: &Path, remote_paths: &[String]) -> bool {
    match dest.symlink_metadata() {
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        Ok(meta) if meta.is_dir() => remote_paths.iter().all(|p| {
            let name = Path::new(p).file_name();
            name.is_some_and(|name| {
                matches!(dest.join(name).symlink_metadata(), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
            })
        }),
        Ok(_) => false,
    }
}

pub(super) fn unexpected(msg: Answer) -> SessionError {
    match msg {
        Answer::Failed { code, message } | Answer::Refused { code, message } => {
            SessionError::from_server(code, message)
        }
        other => SessionError::Protocol(format!("unexpected answer {other:?}")),
    }
}
