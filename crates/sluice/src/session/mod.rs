//! The session plane: one QUIC connection (TLS 1.3, ALPN `sluice/1`) that authenticates both
//! ends, negotiates the transfer specification and carries requests and their results. File bytes
//! never travel on it: each transfer gets a UDP data channel ([`crate::datapath`]) whose keys are
//! exported from this connection's TLS session ([`keys`]), so there is exactly one handshake to
//! trust.
//!
//! # Trust
//!
//! - The server proves its identity with a self-signed ECDSA P-256 certificate kept in its state
//!   directory ([`identity`]). Clients pin its fingerprint (`SHA256:` + unpadded base64 of the
//!   SHA-256 of the certificate DER, as OpenSSH prints host keys) in a known-hosts file
//!   ([`known_hosts`]); a changed fingerprint is always refused.
//! - The client proves it may use the server with a token from the server's token file
//!   ([`tokens`]), sent inside the encrypted connection in the first message.
//!
//! # Message flow
//!
//! Every message is a u32 big-endian length and that many bytes of JSON ([`messages`]), at most
//! 1 MiB, and every read has a deadline. The first bidirectional stream is the handshake (the
//! two-step handshake of MCDTP: specification first, then transfers); each later request has its
//! own bidirectional stream, and several may run at once.
//!
//! The client need not wait for `Welcome` before it sends a request ([`Client::start`]): the
//! server reads no request stream before it has accepted the token and answered, so a request
//! sent behind `Hello` waits in QUIC's buffers meanwhile, and the round trip of the handshake
//! overlaps the first request's (the command line works this way). The client reads a request's
//! answer only after `Welcome`; when the token is refused, that refusal is the request's error.
//!
//! ```text
//!  client                                              server
//!    |==== QUIC + TLS 1.3 handshake (ALPN sluice/1) ====>|  client checks the fingerprint
//!    |  <--------  uni stream: Offer {session_id, max_channels, udp_ports}  (0.5-RTT, with
//!    |             the server's first flight: sockets for an early first upload; early.rs)
//!    |                                                   |
//!    | stream 0: Hello {version, token, spec}  -------->  |  token checked in constant time
//!    |  <--------  Welcome {session_id, spec}             |  channels = min of both offers
//!    |  <--------  Refused {code, message}, then CONNECTION_CLOSE (auth: code 1)
//!    |                                                   |
//!    | stream n: Stat {path} | List {path}  ----------->  |
//!    |  <--------  StatInfo {size, mtime, kind} | Manifest ... | Failed {code, message}
//!    |                                                   |
//!    | stream n: Get {paths, recursive, links, checksum, compress, udp_ports?}: the server
//!    |           sends (at once, behind its manifest, to `udp_ports` when the client gave them)
//!    | stream n: Put {dest, overwrite, checksum, preserve, dry_run, early?}, Manifest ...: the
//!    |           client sends (the first request: at once, to the offered ports, when
//!    |           `early`); then, whoever sends, the same transfer:
//!
//!  sending end                                          receiving end
//!    Manifest {entries, last} ... ------------------->  plans where each entry goes
//!    <------------------  Want {files, replaced, kept, resume, dry_run}  (a dry run ends here)
//!    <------------------  Ready {udp_ports}   (right behind Want, when any wanted file has bytes)
//!    Resumed {kept} ---------------------------------->  (only when Want offered any)
//!    Ready {udp_ports}, then at once ================>  N data channels (sealed, ACK/NAK back)
//!    Digests {blake3: [...]} ... -------------------->  (when its hashes are done)
//!    <------------------  Verified | Failed {code, message}  (compared and stored)
//!    <------------------  Repair {files}, Ready {udp_ports}  (a block did not match; round r)
//!    Repairing {blocks}, Ready {udp_ports}, blocks ==>  (at most two rounds)
//! ```
//!
//! An early start (`early`: a session's first upload, or a download to where nothing is) saves
//! the round trip of `Want`: the receiving end's sockets were bound before the transfer began,
//! so the data goes right behind the manifest, and the receiver's `Want` takes it (`early`) or
//! declines it, and then the transfer goes on as drawn, on phase keys of its own. An upload's
//! first data packet so leaves with the client's `Hello`, one round trip after its first packet;
//! a download's as soon as the server has the request.
//!
//! The transfer is `sluice_session`'s two machines ([`sluice_session::Sending`],
//! [`sluice_session::Receiving`]), which both ends run through one driver (`drive.rs`): the
//! client runs the sending machine in an upload and the receiving one in a download, the server
//! the other. Either end gives up with `Failed {code, message}` (the same JSON whoever sends it);
//! a request refused before its transfer began is answered the same way.
//!
//! A transfer moves a manifest ([`crate::tree`]): one file, or many files, directories and
//! links. The wanted files are laid end to end in one offset space and the data channels move
//! it as one range, so a tree of small files costs no round trip per file. A file that an
//! interrupted transfer left partly on the receiver is offered in `Want` as the BLAKE3 of each
//! 4 MiB block it has; the sender keeps the leading blocks that match its own and sends the
//! rest ([`crate::tree::resume`]).
//!
//! Integrity: neither end reads a file for its hash before or after the data. The sender
//! hashes exactly the bytes it announced, one BLAKE3 per file, on a thread of its own started
//! with the data channels, and sends `Digests` as soon as that is done; the receiver hashes
//! the bytes as it writes them ([`crate::datapath::receive`]). The receiver keeps digests that
//! come early, waits for those that have not come when the last byte arrived (30 s plus 1 s
//! per 50 MB, then a network error), and renames each file into place only if the two hashes
//! match; a file that does not match has its differing 4 MiB blocks moved again (at most two
//! repair rounds) and, if it still does not match, is not stored and the request fails as
//! `integrity`, naming it. It answers as soon as its last byte is written and hashed, in the
//! same instant as its final ACK: the data channels linger meanwhile until their senders shut
//! down, so the answer does not wait the round trip that shutdown takes.
//! The client closes the connection without waiting out QUIC's draining period.
//!
//! Channel count (MCDTP's specification handshake): the client offers `spec.max_channels` (its
//! `--channels`, or one per core), the server answers with the smaller of that and its own
//! `--max-channels` (default one per core), and every transfer of the session runs that many
//! data channels: each `udp_ports` list has exactly that many ports, channel 0 first.
//!
//! Either side may send `Failed` while the data channels run; the other side then cancels its
//! channels. A data channel is also
//! cancelled when the QUIC connection closes, and gives up on its own after about 5 s of silence,
//! so a dead peer is noticed within seconds. When the wanted files hold no byte at all there is
//! no data channel: both ends know the sizes and skip it, and the `Digests` (of no bytes) are
//! still sent and checked.
//!
//! # Entry points
//!
//! [`Server::bind`] then [`Server::run`] on the serving side; [`Client::connect`] then
//! [`Client::download`], [`Client::upload`] (or [`Client::get`] and [`Client::put`] for one
//! file) and [`Client::stat`] on the other.

pub mod access;
pub mod between;
mod blocks;
pub(crate) mod channel;
pub mod client;
mod copy;
pub(crate) mod drive;
mod early;
mod first_flight;
pub mod handle;
pub mod identity;
mod job_log;
mod jobs;
pub mod keys;
pub mod known_hosts;
mod manifest_io;
pub mod messages;
mod metrics;
mod observe;
pub mod path_memory;
pub mod relay;
mod retry;
pub mod server;
mod streams;
mod tcp_port;
pub mod third_party;
pub mod tokens;
pub mod transport;
mod tunnel;

use std::time::Duration;

pub use crate::tree::{Links, Overwrite};
pub use access::{Access, Gate, Place, Running};
pub(crate) use channel::check_spec;
pub use channel::{DEFAULT_PACKET_SIZE, default_channel_config};
pub use client::{Client, ClientConfig, CollectHop, Granted, RelayedDownload, TransferReport};
pub use copy::CopyOptions;
pub(crate) use copy::{add_checksums, mismatch_error, plan_error};
pub use handle::{ClientBuilder, Transfer, TransferEvent};
pub use identity::{Fingerprint, Identity};
pub use known_hosts::{HostKeyError, TrustPolicy};
pub use messages::{ErrorCode, FileKind, JobInfo, JobKind, JobPhase, StatInfo};
pub use metrics::Metrics;
pub use observe::{CopyObserver, PlannedFile};
pub use relay::spool::SpoolConfig;
pub use relay::stripe::{RelayTarget, RelayedOptions, RelayedReport, ServerRelay, rank_relays};
pub use retry::BusyRetry;
pub use server::{Credentials, Server, ServerConfig};
pub use sluice_session::relay::Strategy;
pub use third_party::{DialRule, ThirdParty, ThirdPartyConfig};
pub use transport::{Transport, TransportChoice};

/// The ALPN protocol identifier of the session plane.
pub const ALPN: &[u8] = b"sluice/1";
/// The control-protocol version carried in `Hello` (2: several data channels per transfer;
/// 3: the sender's hash comes in `Digest`, while or after the data moves, instead of in `Put`
/// and `FileInfo`, and the data channels' ACK carries the delivery rate, 44 bytes; 4: a
/// transfer moves a manifest of files, directories and links, with `Want` and `Digests`; 6: in a
/// download the client's `Ready` comes right behind `Want`, and the server sends at once; 7: the
/// data channels probe the path MTU with probe and probe-ack packets, `sluice_proto::pmtu`; 8:
/// messages typed by role (`sluice_session`): a transfer's sender and receiver say the same
/// things in an upload and a download, the receiver's `Ready` always comes right behind `Want`
/// and `Repair`, a dry run is a flag of `Want`, and every failure is `Failed`; 9: the early
/// start: the server's `Offer` before `Hello`, `Put.early`, `Get.udp_ports`, `Want.early`; 10: in startup the data
/// channels time the path with packet trains, whose middle packets carry both pair flags,
/// `sluice_proto::wire::flags::TRAIN`; 11: a relay hop's data moves on one UDP channel,
/// whatever the session negotiated, `relay::hop::HOP_CHANNELS`; 12: a lossy tail's parity
/// packets, kind 9, `sluice_proto::fec`; 13: the packets a tail's parity codes carry
/// `sluice_proto::wire::flags::CODED`, and the receiver keeps payloads from the first of them
/// on, not from its first loss).
pub const PROTOCOL_VERSION: u32 = 13;
pub use sluice_session::negotiate::MAX_CHANNELS;
/// The phase of a transfer's data after the receiver declined an early start (repair rounds
/// are the phases between 0 and it): for a carrier that tells a transfer's data from a repair.
pub use sluice_session::transfer::RESTART_PHASE;
/// The most channels chosen automatically (one per core, up to this).
pub const AUTO_CHANNELS_CAP: u32 = 8;

/// The channel count an end offers by default: one per core it has, at most
/// [`AUTO_CHANNELS_CAP`].
pub fn auto_channels() -> u32 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    u32::try_from(cores).unwrap_or(u32::MAX).clamp(1, AUTO_CHANNELS_CAP)
}
/// Silence after which a data channel gives up: a dead peer is noticed within seconds.
pub const DATA_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// Application close codes of the QUIC connection.
pub(crate) mod close_code {
    /// Orderly close.
    pub(crate) const DONE: u32 = 0;
    /// The client failed authentication.
    pub(crate) const AUTH: u32 = 1;
    /// The peer broke the protocol.
    pub(crate) const PROTOCOL: u32 = 2;
    /// The server is shutting down.
    pub(crate) const SHUTDOWN: u32 = 3;
    /// Orderly close by a client whose last download it verified (its `Verified` written
    /// already): the close carries that verdict too, in case the message was still on its way
    /// ([`crate::session::Client::close`]). A server that still awaits a download's answer
    /// takes this close as its `Verified`.
    pub(crate) const VERIFIED: u32 = 4;
}

/// Why a session operation failed. Each variant is one class of failure a user acts on
/// differently (the command line maps them to exit codes).
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The server did not accept the token.
    #[error("authentication failed: {0}")]
    Auth(String),
    /// The server's identity is unknown, changed, or not the pinned one.
    #[error(transparent)]
    HostKey(#[from] HostKeyError),
    /// The remote path does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The server refused the request (a path outside its root, not a regular file, ...).
    #[error("refused: {0}")]
    Refused(String),
    /// Not now: the server has no capacity for another transfer, or another transfer is
    /// writing a file this one would write (at either end; the message names it). Try again
    /// when it ends.
    #[error("busy: {0}")]
    Busy(String),
    /// The connection or a data channel failed, or the peer stopped answering.
    #[error("network: {0}")]
    Network(String),
    /// The received bytes do not hash to what the sender announced.
    #[error("integrity check failed: {0}")]
    Integrity(String),
    /// Some files of a tree were stored and verified, others failed (named in the message).
    #[error("partly done: {0}")]
    Partial(String),
    /// A local file operation failed (or the local setup, such as a socket).
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file operation failed at the peer (its disk is full, a path it writes is not
    /// writable, ...): the peer's message, after its name.
    #[error("{peer}: {message}")]
    PeerIo {
        /// Which end failed.
        peer: Peer,
        /// What it said.
        message: String,
    },
    /// The peer sent something the protocol does not allow (or a version we do not speak).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// Local setup is unusable: unsafe key or token file permissions, an empty token file, an
    /// invalid channel configuration.
    #[error("configuration error: {0}")]
    Config(String),
}

/// The other end of a session, as an error names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// The server (the peer of a client).
    Server,
    /// The client (the peer of a server).
    Client,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Peer::Server => "the server",
            Peer::Client => "the client",
        })
    }
}

impl SessionError {
    /// An [`SessionError::Io`] with context.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        SessionError::Io { context: context.into(), source }
    }

    /// The error the server's `Error` or `Refused` message stands for.
    pub(crate) fn from_server(code: ErrorCode, message: String) -> Self {
        Self::from_peer(Peer::Server, code, message)
    }

    /// The error `peer`'s message of `code` stands for: the same class as at the peer, so that
    /// a file error there is not taken for one here.
    pub(crate) fn from_peer(peer: Peer, code: ErrorCode, message: String) -> Self {
        match code {
            ErrorCode::Auth => SessionError::Auth(message),
            ErrorCode::NotFound => SessionError::NotFound(message),
            ErrorCode::Refused => SessionError::Refused(message),
            ErrorCode::Busy => SessionError::Busy(message),
            ErrorCode::Integrity => SessionError::Integrity(message),
            ErrorCode::Partial => SessionError::Partial(message),
            ErrorCode::Io => SessionError::PeerIo { peer, message },
            ErrorCode::Network => SessionError::Network(message),
            ErrorCode::Protocol => SessionError::Protocol(message),
        }
    }

    /// The message for the peer, without the class prefix of `Display` (the code carries it).
    pub fn detail(&self) -> String {
        match self {
            SessionError::Auth(m)
            | SessionError::NotFound(m)
            | SessionError::Refused(m)
            | SessionError::Busy(m)
            | SessionError::Network(m)
            | SessionError::Integrity(m)
            | SessionError::Partial(m)
            | SessionError::Protocol(m)
            | SessionError::Config(m)
            | SessionError::PeerIo { message: m, .. } => m.clone(),
            other => other.to_string(),
        }
    }

    /// The code to send to the peer for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            SessionError::Auth(_) => ErrorCode::Auth,
            SessionError::NotFound(_) => ErrorCode::NotFound,
            SessionError::Refused(_) => ErrorCode::Refused,
            SessionError::Busy(_) => ErrorCode::Busy,
            SessionError::Integrity(_) => ErrorCode::Integrity,
            SessionError::Partial(_) => ErrorCode::Partial,
            SessionError::Io { .. } | SessionError::PeerIo { .. } | SessionError::Config(_) => {
                ErrorCode::Io
            }
            SessionError::Network(_) | SessionError::HostKey(_) => ErrorCode::Network,
            SessionError::Protocol(_) => ErrorCode::Protocol,
        }
    }
}

/// Waits until `at`; without one, never (a `select!` arm that is off).
pub(crate) async fn sleep_until(at: Option<std::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// A mutex's guard, whoever held it when panicking (what it guards stays consistent: each
/// holder's change is whole or not made).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a closed connection means to the user.
pub(crate) fn connection_error(err: &quinn::ConnectionError) -> SessionError {
    use quinn::ConnectionError as E;
    match err {
        E::ApplicationClosed(close) => {
            let reason = String::from_utf8_lossy(&close.reason).into_owned();
            match close.error_code.into_inner() {
                c if c == u64::from(close_code::AUTH) => SessionError::Auth(reason),
                c if c == u64::from(close_code::PROTOCOL) => SessionError::Protocol(reason),
                c if c == u64::from(close_code::SHUTDOWN) => {
                    SessionError::Network(format!("the peer is shutting down: {reason}"))
                }
                _ => SessionError::Network(format!("the peer closed the connection: {reason}")),
            }
        }
        // quinn's `Incoming::refuse`: the server turned the connection away before its
        // handshake, at its limit of sessions or of connections being set up. Busy, not a
        // failure of the network: the same attempt later may well be served.
        E::ConnectionClosed(close)
            if close.error_code == quinn::TransportErrorCode::CONNECTION_REFUSED =>
        {
            SessionError::Busy(
                "the server turned the connection away (it is at its limit of sessions, or of \
                 connections being set up)"
                    .into(),
            )
        }
        E::TimedOut => SessionError::Network(
            "the peer stopped answering (QUIC idle timeout): it was stopped or the path is down"
                .into(),
        ),
        E::LocallyClosed => SessionError::Network("the connection was closed locally".into()),
        E::Reset => SessionError::Network("the peer reset the connection (did it restart?)".into()),
        other => SessionError::Network(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_from_the_peer_keeps_its_class_and_names_the_peer_once() {
        let said = "x.bin: No such file or directory (os error 2)";
        let err = SessionError::from_server(ErrorCode::Io, said.into());
        assert!(matches!(err, SessionError::PeerIo { peer: Peer::Server, .. }), "{err:?}");
        assert_eq!(err.to_string(), format!("the server: {said}"));
        assert!(std::error::Error::source(&err).is_none(), "no cause to say the reason again");
        assert_eq!((err.code(), err.detail()), (ErrorCode::Io, said.to_owned()));
        let err = SessionError::from_peer(Peer::Client, ErrorCode::Io, said.into());
        assert_eq!(err.to_string(), format!("the client: {said}"));

        let busy = "x.bin: another transfer is writing it";
        let err = SessionError::from_server(ErrorCode::Busy, busy.into());
        assert!(matches!(&err, SessionError::Busy(m) if m == busy), "{err:?}");
        assert_eq!(err.to_string(), format!("busy: {busy}"));
    }
}
