//! The sender's BLAKE3 beside the data (protocol 3): each end hashes while the data moves
//! instead of before and after it.
//!
//! - The sending end starts hashing the announced bytes on the blocking pool when its data
//!   channels start ([`run_sending`]) and sends `Digest` on the request's stream when the hash
//!   is done: before, during or after the data, whichever the disk and the network make it.
//! - The receiving end hashes what it writes as it writes it ([`crate::datapath::receive_file`]),
//!   listens for `Digest` while the data moves ([`run_receiving`]), and once the data is all
//!   there waits a bounded time for a `Digest` that has not come ([`await_digest`]).
//!
//! Two reads of the request's stream can be pending across `select!` rounds, so the stream is
//! read through [`Messages`], which never loses a message half read when a round ends.

use std::fmt::Debug;
use std::fs::File;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::SessionError;
use super::channel::{DataTask, data_error, frame_error};
use super::messages::{ClientMsg, FrameError, ServerMsg, read_message, write_message};
use crate::datapath::{ChannelReport, DataError};
use crate::files::hash_prefix;

/// After the receiver answered, how long the sending channels may take to see their last ACK
/// (for their report) before they are stopped.
const SENDER_GRACE: Duration = Duration::from_secs(2);

/// One end's control messages, as far as the digest goes.
pub(crate) trait Control: Serialize + DeserializeOwned + Debug + Send + 'static {
    /// The `Digest` message carrying `blake3` (hex).
    fn digest(blake3: String) -> Self;
    /// What the other end makes of this message while it waits for a digest: the hash, or
    /// the error that ends the request (the sender gave up, or broke the protocol).
    fn into_digest(self) -> Result<blake3::Hash, SessionError>;
}

/// Reads a hex BLAKE3 from the wire.
fn parse_hex(hex: &str) -> Result<blake3::Hash, SessionError> {
    blake3::Hash::from_hex(hex)
        .map_err(|_| SessionError::Protocol(format!("bad BLAKE3 {hex:?} in Digest")))
}

impl Control for ClientMsg {
    fn digest(blake3: String) -> Self {
        ClientMsg::Digest { blake3 }
    }

    fn into_digest(self) -> Result<blake3::Hash, SessionError> {
        match self {
            ClientMsg::Digest { blake3 } => parse_hex(&blake3),
            ClientMsg::Failed { code, message } => Err(SessionError::from_remote(code, message)),
            other => Err(SessionError::Protocol(format!("expected Digest, got {other:?}"))),
        }
    }
}

impl Control for ServerMsg {
    fn digest(blake3: String) -> Self {
        ServerMsg::Digest { blake3 }
    }

    fn into_digest(self) -> Result<blake3::Hash, SessionError> {
        match self {
            ServerMsg::Digest { blake3 } => parse_hex(&blake3),
            ServerMsg::Error { code, message } => Err(SessionError::from_remote(code, message)),
            other => Err(SessionError::Protocol(format!("expected Digest, got {other:?}"))),
        }
    }
}

/// The read in progress; it hands the stream back with the message.
type Reading<'s, M> =
    Pin<Box<dyn Future<Output = (&'s mut quinn::RecvStream, Result<M, FrameError>)> + Send + 's>>;

/// The messages of one request's stream, read one after another without a deadline (callers
/// bound their waits). [`Messages::next`] is cancel-safe, unlike [`read_message`]: a message
/// half read when its future is dropped is finished by the next call.
pub(crate) struct Messages<'s, M> {
    /// Always the next read; a future does nothing until polled.
    next: Reading<'s, M>,
}

impl<'s, M: DeserializeOwned + Send + 's> Messages<'s, M> {
    pub(crate) fn new(recv: &'s mut quinn::RecvStream) -> Self {
        Self { next: Self::read(recv) }
    }

    fn read(recv: &'s mut quinn::RecvStream) -> Reading<'s, M> {
        Box::pin(async move {
            let msg = read_message(&mut *recv, Duration::MAX).await;
            (recv, msg)
        })
    }

    /// The next message. Cancel-safe.
    pub(crate) async fn next(&mut self) -> Result<M, FrameError> {
        let (recv, msg) = (&mut self.next).await;
        // Replaced in the same poll that completed it, so a finished read is never polled.
        self.next = Self::read(recv);
        msg
    }
}

/// Waits for `task` to end; without a task, never.
async fn join_some<T: Send + 'static>(task: &mut Option<DataTask<T>>) -> Result<T, SessionError> {
    match task {
        Some(task) => task.join().await,
        None => std::future::pending().await,
    }
}

/// How the sending end's transfer ended.
#[derive(Debug)]
pub(crate) struct Sent<R> {
    /// The data channels' report: `None` for an empty file, or channels stopped because the
    /// answer came before their last ACK.
    pub(crate) report: Option<ChannelReport>,
    /// The digest sent: `None` if the answer came before the hash was done (then the answer
    /// can only be an error).
    pub(crate) digest: Option<blake3::Hash>,
    /// The receiver's answer.
    pub(crate) reply: R,
}

/// The sending end of a transfer: runs `data` (`None` for an empty file), hashes the first
/// `size` bytes of `file` beside it, sends `W::digest` on `send` when the hash is done, and
/// returns with the receiver's answer (waiting up to `wait` for it once both are done).
///
/// An answer that comes first (the receiver gave up, or has every byte and the digest before
/// the last ACK reached this end) ends the hashing at once and the channels after a short
/// grace. The error is this end's failure (data channel, reading the file) or the stream's.
pub(crate) async fn run_sending<W: Control, R: DeserializeOwned + Send + 'static>(
    mut data: Option<DataTask<Result<ChannelReport, DataError>>>,
    file: Arc<File>,
    size: u64,
    (send, recv): (&mut quinn::SendStream, &mut quinn::RecvStream),
    conn: &quinn::Connection,
    wait: Duration,
) -> Result<Sent<R>, SessionError> {
    let mut hashing = Some(DataTask::spawn(move |cancel| hash_prefix(&file, size, cancel)));
    let mut messages = Messages::<R>::new(recv);
    let mut report = None;
    let mut digest = None;
    while data.is_some() || hashing.is_some() {
        tokio::select! {
            done = join_some(&mut data) => {
                data = None;
                report = Some(done?.map_err(|e| data_error(e, conn))?);
            }
            hashed = join_some(&mut hashing) => {
                hashing = None;
                let hash = hashed?
                    .map_err(|e| SessionError::io("hashing the file being sent", e))?
                    .ok_or_else(|| SessionError::Network("hashing was cancelled".into()))?;
                let msg = W::digest(hash.to_hex().to_string());
                write_message(send, &msg).await.map_err(|e| frame_error(e, conn))?;
                digest = Some(hash);
            }
            reply = messages.next() => {
                if let Some(mut task) = data {
                    if let Ok(Ok(Ok(done))) = tokio::time::timeout(SENDER_GRACE, task.join()).await {
                        report = Some(done);
                    }
                    task.stop().await;
                }
                // Dropping `hashing` cancels it.
                let reply = reply.map_err(|e| frame_error(e, conn))?;
                return Ok(Sent { report, digest, reply });
            }
        }
    }
    let reply = tokio::time::timeout(wait, messages.next())
        .await
        .unwrap_or(Err(FrameError::Timeout(wait)))
        .map_err(|e| frame_error(e, conn))?;
    Ok(Sent { report, digest, reply })
}

/// The receiving end while the data moves: runs `task` to its end, keeping a `Digest` that
/// comes meanwhile. Returns the task's output and the digest if it came. Any other message
/// (the sender gave up, or broke the protocol) stops the task and is the error; so is a
/// failed data channel.
pub(crate) async fn run_receiving<M: Control, T: Send + 'static>(
    task: &mut DataTask<Result<T, DataError>>,
    messages: &mut Messages<'_, M>,
    conn: &quinn::Connection,
) -> Result<(T, Option<blake3::Hash>), SessionError> {
    let mut digest = None;
    loop {
        tokio::select! {
            done = task.join() => return Ok((done?.map_err(|e| data_error(e, conn))?, digest)),
            msg = messages.next() => {
                let heard = msg.map_err(|e| frame_error(e, conn)).and_then(M::into_digest);
                match heard {
                    Ok(hash) if digest.is_none() => digest = Some(hash),
                    Ok(_) => {
                        task.stop().await;
                        return Err(SessionError::Protocol("a second Digest".into()));
                    }
                    Err(err) => {
                        task.stop().await;
                        return Err(err);
                    }
                }
            }
        }
    }
}

/// The sender's digest once the data is all there: `have` if it came already, else the next
/// message, within `wait`.
pub(crate) async fn await_digest<M: Control>(
    messages: &mut Messages<'_, M>,
    have: Option<blake3::Hash>,
    conn: &quinn::Connection,
    wait: Duration,
) -> Result<blake3::Hash, SessionError> {
    if let Some(hash) = have {
        return Ok(hash);
    }
    match tokio::time::timeout(wait, messages.next()).await {
        Ok(msg) => msg.map_err(|e| frame_error(e, conn)).and_then(M::into_digest),
        Err(_) => Err(SessionError::Network(format!(
            "the sender's Digest did not come within {} s of the last byte",
            wait.as_secs_f64()
        ))),
    }
}
