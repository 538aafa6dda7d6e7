//! The quinn-and-files driver of the transfer machines of `sluice-session`: one function runs
//! the sending role ([`run_sending`]) and one the receiving role ([`run_receiving`]), each on
//! a request's QUIC stream, UDP data channels and files. The server and the client call the
//! same two: an upload is the client's `run_sending` against the server's `run_receiving`, a
//! download the other way round.
//!
//! Each loops the same way: do every effect the machine asks for (messages are written in
//! order; file work runs on the blocking pool; data channels on their own threads), then wait
//! for the first of a message, a finished job, a data phase's end or the machine's deadline,
//! and hand it in. A failure of this end is handed in too ([`Sending::handle_failure`]), so the
//! peer always hears why, and is returned as it happened.

pub(crate) mod data;
mod receive;
mod send;

use std::net::{IpAddr, UdpSocket};
use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use serde::de::DeserializeOwned;
use sluice_session::messages::{ErrorCode, ReceiverMsg, SenderMsg};
use sluice_session::{Fault, Receiving, Sending};
use tokio::task::JoinHandle;

use super::blocks::file_blocks;
use super::channel::{ChannelSetup, DataTask, bind_data_sockets, frame_error};
use super::keys::Role;
use super::messages::{FrameError, Messages, write_message};
use super::observe::PlannedFile;
use super::{Peer, SessionError, close_code, sleep_until};
use crate::datapath::Fault as TestFault;
use crate::tree::FileSet;

use data::DataPlan;
pub(crate) use receive::{Destination, run_receiving};
pub(crate) use send::{run_sending, wanted_names, write_opening};

/// One end of a request's stream.
pub(crate) struct Wire<'a, 's, M> {
    pub(crate) conn: &'a quinn::Connection,
    pub(crate) send: &'a mut quinn::SendStream,
    pub(crate) messages: Messages<'s, M>,
    /// Whether the peer knows how the transfer ended: this end's `Failed` went out, or the
    /// peer's came (the caller need not send one).
    pub(crate) told: bool,
    /// Whether the transfer ended with the peer's `Failed`.
    pub(crate) peer_failed: bool,
    /// A directory whose path this end's failures must not show (a server's root): the peer
    /// reads paths as it named them.
    pub(crate) hide: Option<&'a Path>,
    /// Whether the peer may still send (it has not finished its side of the stream).
    open: bool,
}

impl<'a, 's, M: DeserializeOwned + Send + 's> Wire<'a, 's, M> {
    pub(crate) fn new(
        conn: &'a quinn::Connection,
        send: &'a mut quinn::SendStream,
        recv: &'s mut quinn::RecvStream,
    ) -> Self {
        Wire {
            conn,
            send,
            messages: Messages::new(recv),
            told: false,
            peer_failed: false,
            hide: None,
            open: true,
        }
    }

    /// After a write failed: the peer's `Failed`, if it sent one (it stops reading when it
    /// gives up, which fails this end's writes before its answer is read).
    async fn peer_failure<D: Driven<Incoming = M>>(&mut self) -> Option<M> {
        if !self.open {
            return None;
        }
        match tokio::time::timeout(WHY_WAIT, self.messages.next()).await {
            Ok(Ok(msg)) if D::peer_failed(&msg) => Some(msg),
            _ => None,
        }
    }

    /// The error a machine's fault stands for, noting a peer's failure.
    fn fault(&mut self, fault: Fault, local: Option<SessionError>, peer: Peer) -> SessionError {
        if matches!(fault, Fault::Peer { .. }) {
            self.told = true;
            self.peer_failed = true;
        }
        fault_error(fault, local, peer)
    }

    pub(crate) async fn write<T: Serialize>(&mut self, msg: &T) -> Result<(), SessionError> {
        write_message(self.send, msg).await.map_err(|e| frame_error(e, self.conn))
    }
}

/// What the data channels and the files of one end need.
pub(crate) struct Channels<'a> {
    pub(crate) setup: ChannelSetup<'a>,
    /// For tests of repair: a fault in this end's data path.
    pub(crate) fault: Option<TestFault>,
    /// Where this end keeps what paths delivered to its sending (`None`: path memory off).
    pub(crate) memory: Option<std::sync::Arc<crate::session::path_memory::PathMemory>>,
    /// The data's own transport, where the caller brings one (a WebTransport session's
    /// streams): no sockets then, and no ports in the messages.
    pub(crate) carrier: Option<std::sync::Arc<dyn crate::datapath::Carrier>>,
}

impl Channels<'_> {
    /// The other end of the session.
    fn peer(&self) -> Peer {
        match self.setup.role {
            Role::Client => Peer::Server,
            Role::Server => Peer::Client,
        }
    }

    /// Path memory for a sending phase over UDP: the path is the peer's certificate (its
    /// address when it shows none) from this end's address. Reads the memory's file.
    fn recall(&self) -> Option<data::PathRecall> {
        let memory = self.memory.clone()?;
        if self.setup.streams.is_some() || self.carrier.is_some() {
            return None;
        }
        let conn = self.setup.conn;
        let peer = crate::session::identity::peer_fingerprint(conn)
            .map_or_else(|| self.peer_ip().to_string(), |f| f.to_string());
        // A client's endpoint is bound to the unspecified address: the source address the
        // route toward the peer takes (connecting a UDP socket sends nothing).
        let local = conn.local_ip().or_else(|| {
            let any: IpAddr = match self.peer_ip() {
                IpAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
                IpAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
            };
            let probe = UdpSocket::bind((any, 0)).ok()?;
            probe.connect((self.peer_ip(), 9)).ok()?;
            probe.local_addr().ok().map(|a| a.ip())
        });
        let key = crate::session::path_memory::PathMemory::key(&peer, local);
        let recalled = memory.recall(&key, conn.rtt(), std::time::SystemTime::now());
        Some(data::PathRecall { memory, key, recalled })
    }

    fn peer_ip(&self) -> IpAddr {
        self.setup.conn.remote_address().ip().to_canonical()
    }

    /// This end's data sockets and their ports; over TCP none (the client dials the server's
    /// TCP port), and zeros for the ports the messages carry; with a carrier, none at all.
    fn bind(&self) -> Result<(Vec<UdpSocket>, Vec<u16>), SessionError> {
        if self.carrier.is_some() {
            return Ok((Vec::new(), Vec::new()));
        }
        if self.setup.streams.is_some() {
            return Ok((Vec::new(), vec![0; self.setup.negotiated.channels as usize]));
        }
        let local = self.setup.conn.local_ip().map(|ip| ip.to_canonical());
        let buffer = crate::datapath::SOCKET_BUFFER_BYTES;
        bind_data_sockets(self.setup.negotiated.channels, local, self.peer_ip(), buffer)
    }

    /// `phase`'s channels on `sockets` toward `peer_ports`; `patient` is how long they may
    /// hear nothing back at first (an early start's, until the receiver has planned), when
    /// that is longer than their idle timeout.
    fn params(
        &self,
        phase: u32,
        sockets: Option<Vec<UdpSocket>>,
        peer_ports: &[u16],
        patient: Option<std::time::Duration>,
    ) -> Result<DataPlan, SessionError> {
        if let Some(carrier) = &self.carrier {
            return Ok(DataPlan::Carried { carrier: carrier.clone(), phase, ends: Vec::new() });
        }
        if let Some(opener) = self.setup.streams {
            return ChannelSetup { phase, ..self.setup }.streams(opener).map(DataPlan::Streams);
        }
        let sockets = sockets.ok_or_else(|| {
            SessionError::Protocol(format!("data of phase {phase} before its sockets were bound"))
        })?;
        let mut params =
            ChannelSetup { phase, ..self.setup }.params(sockets, self.peer_ip(), peer_ports)?;
        if let Some(wait) = patient {
            for channel in &mut params {
                channel.config.first_contact_us = wait.as_micros() as u64;
            }
        }
        Ok(DataPlan::Channels(params))
    }
}

/// Either machine, as its driver hands it what the peer's stream gave and this end's
/// failures.
trait Driven {
    /// What the peer says.
    type Incoming: DeserializeOwned + Send + 'static;
    /// What this end says.
    type Outgoing: Serialize;
    fn handle_message(&mut self, now: Instant, msg: Self::Incoming);
    fn handle_peer_finished(&mut self, now: Instant);
    fn handle_failure(&mut self, code: ErrorCode, message: String);
    /// Whether `msg` is this end's `Failed`.
    fn is_failed(msg: &Self::Outgoing) -> bool;
    /// Whether `msg` is the peer's `Failed`.
    fn peer_failed(msg: &Self::Incoming) -> bool;
    /// What a connection the peer closed with [`close_code::VERIFIED`] answers, if this end
    /// awaits an answer of that kind: the receiver's `Verified` (a client that verified a
    /// download closes without waiting for the server to read it).
    fn verdict_in_close() -> Option<Self::Incoming>;
}

impl Driven for Sending {
    type Incoming = ReceiverMsg;
    type Outgoing = SenderMsg;
    fn handle_message(&mut self, now: Instant, msg: ReceiverMsg) {
        Sending::handle_message(self, now, msg);
    }
    fn handle_peer_finished(&mut self, now: Instant) {
        Sending::handle_peer_finished(self, now);
    }
    fn handle_failure(&mut self, code: ErrorCode, message: String) {
        Sending::handle_failure(self, code, message);
    }
    fn is_failed(msg: &SenderMsg) -> bool {
        matches!(msg, SenderMsg::Failed { .. })
    }
    fn peer_failed(msg: &ReceiverMsg) -> bool {
        matches!(msg, ReceiverMsg::Failed { .. })
    }
    fn verdict_in_close() -> Option<ReceiverMsg> {
        Some(ReceiverMsg::Verified)
    }
}

impl Driven for Receiving {
    type Incoming = SenderMsg;
    type Outgoing = ReceiverMsg;
    fn handle_message(&mut self, now: Instant, msg: SenderMsg) {
        Receiving::handle_message(self, now, msg);
    }
    fn handle_peer_finished(&mut self, now: Instant) {
        Receiving::handle_peer_finished(self, now);
    }
    fn handle_failure(&mut self, code: ErrorCode, message: String) {
        Receiving::handle_failure(self, code, message);
    }
    fn is_failed(msg: &ReceiverMsg) -> bool {
        matches!(msg, ReceiverMsg::Failed { .. })
    }
    fn peer_failed(msg: &SenderMsg) -> bool {
        matches!(msg, SenderMsg::Failed { .. })
    }
    fn verdict_in_close() -> Option<SenderMsg> {
        None
    }
}

/// This end failed with `err`: the machine tells the peer (in words without the `hide`
/// directory's path), and the first such error is the one returned.
fn fail<M: Driven>(
    machine: &mut M,
    local: &mut Option<SessionError>,
    hide: Option<&Path>,
    err: SessionError,
) {
    let words = match hide {
        Some(root) => unrooted(&err.detail(), root),
        None => err.detail(),
    };
    machine.handle_failure(err.code(), words);
    local.get_or_insert(err);
}

/// How long a write that failed waits for the peer's `Failed` that may explain it.
const WHY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Writes a machine's message. A write that fails is this end's failure (but for its own
/// `Failed`: the peer is gone or told already), unless the peer stopped reading because it
/// failed: then its `Failed`, read within [`WHY_WAIT`], is why. A `Failed` written tells the
/// peer.
async fn write_msg<M: Driven>(
    wire: &mut Wire<'_, '_, M::Incoming>,
    machine: &mut M,
    msg: &M::Outgoing,
    local: &mut Option<SessionError>,
) {
    let failed = M::is_failed(msg);
    match wire.write(msg).await {
        Ok(()) => wire.told |= failed,
        Err(_) if failed => {}
        Err(err) => match wire.peer_failure::<M>().await {
            Some(why) => machine.handle_message(Instant::now(), why),
            None => fail(machine, local, wire.hide, err),
        },
    }
}

/// Hands what the peer's stream gave to the machine: a message, the stream's end (no more
/// reads then: `open` goes false), or a failure.
fn take_read<M: Driven>(
    wire: &mut Wire<'_, '_, M::Incoming>,
    machine: &mut M,
    read: Result<M::Incoming, FrameError>,
    local: &mut Option<SessionError>,
) {
    match read {
        Ok(msg) => machine.handle_message(Instant::now(), msg),
        Err(FrameError::Eof) => {
            wire.open = false;
            machine.handle_peer_finished(Instant::now());
        }
        Err(e) => match M::verdict_in_close().filter(|_| closed_verified(wire.conn)) {
            Some(verdict) => {
                // Nothing more comes; the machine judges whether it awaited that answer.
                tracing::debug!("the client's close says it verified");
                wire.open = false;
                machine.handle_message(Instant::now(), verdict);
            }
            None => {
                let err = frame_error(e, wire.conn);
                fail(machine, local, wire.hide, err);
            }
        },
    }
}

/// Whether the peer closed `conn` with [`close_code::VERIFIED`].
fn closed_verified(conn: &quinn::Connection) -> bool {
    matches!(
        conn.close_reason(),
        Some(quinn::ConnectionError::ApplicationClosed(close))
            if close.error_code.into_inner() == u64::from(close_code::VERIFIED)
    )
}

/// `message` with the server's own path of `root` taken out of every path in it, so that paths
/// read as the client names them (relative to the token's root).
pub(crate) fn unrooted(message: &str, root: &Path) -> String {
    let root = root.to_string_lossy();
    let within = format!("{}/", root.trim_end_matches('/'));
    message.replace(&within, "").replace(root.as_ref(), ".")
}

/// The error a machine's fault stands for, or `local` (this end's own failure) when it is
/// that.
fn fault_error(fault: Fault, local: Option<SessionError>, peer: Peer) -> SessionError {
    match fault {
        Fault::Peer { code, message } => SessionError::from_peer(peer, code, message),
        Fault::Protocol(m) => SessionError::Protocol(m),
        Fault::Timeout(m) => SessionError::Network(m),
        Fault::Local { code, message } => {
            local.unwrap_or_else(|| SessionError::from_peer(peer, code, message))
        }
    }
}

/// Waits for an optional task; without one, never.
async fn join_some<T: Send + 'static>(task: &mut Option<DataTask<T>>) -> Result<T, SessionError> {
    match task {
        Some(task) => task.join().await,
        None => std::future::pending().await,
    }
}

async fn join_job<T>(job: &mut Option<JoinHandle<T>>) -> Result<T, SessionError> {
    match job {
        Some(handle) => {
            let result = handle.await;
            *job = None;
            result.map_err(|e| SessionError::io("file task", std::io::Error::other(e.to_string())))
        }
        None => std::future::pending().await,
    }
}

/// The wanted files' names with their sizes, for an observer.
pub(crate) fn planned_files(names: &[String], files: &FileSet) -> Vec<PlannedFile> {
    names
        .iter()
        .enumerate()
        .map(|(k, path)| PlannedFile {
            path: path.clone(),
            size: files.file_at(k).map_or(0, |f| f.1),
        })
        .collect()
}

/// Every block's BLAKE3 of each file `which` of `files`.
fn hash_blocks(files: &FileSet, which: &[u32]) -> Result<Vec<Vec<blake3::Hash>>, SessionError> {
    which
        .iter()
        .map(|&k| {
            file_blocks(files, k as usize)
                .map_err(|e| SessionError::io("hashing blocks to repair", e))
        })
        .collect()
}
