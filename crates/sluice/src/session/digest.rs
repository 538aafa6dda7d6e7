//! The sender's BLAKE3 beside the data: each end hashes while the data moves instead of before
//! and after it.
//!
//! - The sending end starts hashing the files it sends on the blocking pool when its data
//!   channels start ([`run_sending`]) and sends `Digests` (one BLAKE3 per file, in batches) on
//!   the request's stream when the hashes are done: before, during or after the data,
//!   whichever the disk and the network make it.
//! - The receiving end hashes what it writes as it writes it ([`crate::datapath::receive`]),
//!   keeps the `Digests` that come while the data moves ([`run_receiving`]), and once the data
//!   is all there waits a bounded time for those that have not come ([`await_digests`]).
//!
//! Two reads of the request's stream can be pending across `select!` rounds, so the stream is
//! read through [`Messages`], which never loses a message half read when a round ends.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;

use super::SessionError;
use super::channel::{DataTask, data_error, frame_error};
use super::messages::{ClientMsg, FrameError, ServerMsg, read_message, write_message};
use crate::datapath::{ChannelReport, DataError, ReceivedExtents};
use crate::files::hash_extents;
use crate::tree::FileSet;

/// After the receiver answered, how long the sending channels may take to see their last ACK
/// (for their report) before they are stopped.
const SENDER_GRACE: Duration = Duration::from_secs(2);
/// Hashes per `Digests` message (about 540 kB of JSON, under the 1 MiB frame limit).
const DIGESTS_PER_MESSAGE: usize = 8192;

/// One end's control messages, as far as the digests go.
pub(crate) trait Control: Serialize + DeserializeOwned + Debug + Send + 'static {
    /// The `Digests` message carrying `blake3` (hex).
    fn digests(blake3: Vec<String>) -> Self;
    /// What the other end makes of this message while it waits for digests: the hashes, or
    /// the error that ends the request (the sender gave up, or broke the protocol).
    fn into_digests(self) -> Result<Vec<blake3::Hash>, SessionError>;
}

/// Reads hex BLAKE3s from the wire.
fn parse_hex(hexes: &[String]) -> Result<Vec<blake3::Hash>, SessionError> {
    hexes
        .iter()
        .map(|hex| {
            blake3::Hash::from_hex(hex)
                .map_err(|_| SessionError::Protocol(format!("bad BLAKE3 {hex:?} in Digests")))
        })
        .collect()
}

impl Control for ClientMsg {
    fn digests(blake3: Vec<String>) -> Self {
        ClientMsg::Digests { blake3 }
    }

    fn into_digests(self) -> Result<Vec<blake3::Hash>, SessionError> {
        match self {
            ClientMsg::Digests { blake3 } => parse_hex(&blake3),
            ClientMsg::Failed { code, message } => Err(SessionError::from_client(code, message)),
            other => Err(SessionError::Protocol(format!("expected Digests, got {other:?}"))),
        }
    }
}

impl Control for ServerMsg {
    fn digests(blake3: Vec<String>) -> Self {
        ServerMsg::Digests { blake3 }
    }

    fn into_digests(self) -> Result<Vec<blake3::Hash>, SessionError> {
        match self {
            ServerMsg::Digests { blake3 } => parse_hex(&blake3),
            ServerMsg::Error { code, message } => Err(SessionError::from_server(code, message)),
            other => Err(SessionError::Protocol(format!("expected Digests, got {other:?}"))),
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
    /// The data channels' report: `None` when no byte moved, or channels stopped because the
    /// answer came before their last ACK.
    pub(crate) report: Option<ChannelReport>,
    /// The digests sent: `None` if the answer came before the hashes were done (then the
    /// answer can only be an error).
    pub(crate) digests: Option<Vec<blake3::Hash>>,
    /// The receiver's answer.
    pub(crate) reply: R,
}

/// The sending end of a transfer: runs `data` (`None` when no byte moves), hashes each file of
/// `files` beside it, sends `W::digests` on `send` when the hashes are done, and returns with
/// the receiver's answer (waiting up to `wait` for it once both are done).
///
/// An answer that comes first (the receiver gave up, or has every byte and the digests before
/// the last ACK reached this end) ends the hashing at once and the channels after a short
/// grace. The error is this end's failure (data channel, reading the files) or the stream's.
pub(crate) async fn run_sending<W: Control, R: DeserializeOwned + Send + 'static>(
    mut data: Option<DataTask<Result<ChannelReport, DataError>>>,
    files: Arc<FileSet>,
    (send, recv): (&mut quinn::SendStream, &mut quinn::RecvStream),
    conn: &quinn::Connection,
    wait: Duration,
) -> Result<Sent<R>, SessionError> {
    // With no file wanted there is nothing to hash and no digest to send: the receiver may
    // answer at once.
    let mut digests = files.is_empty().then(Vec::new);
    let mut hashing = (!files.is_empty())
        .then(|| DataTask::spawn(move |cancel| hash_extents(&*files, 0, files.ends(), cancel)));
    let mut messages = Messages::<R>::new(recv);
    let mut report = None;
    while data.is_some() || hashing.is_some() {
        tokio::select! {
            done = join_some(&mut data) => {
                data = None;
                report = Some(done?.map_err(|e| data_error(e, conn))?);
            }
            hashed = join_some(&mut hashing) => {
                hashing = None;
                let hashes = hashed?
                    .map_err(|e| SessionError::io("hashing the files being sent", e))?
                    .ok_or_else(|| SessionError::Network("hashing was cancelled".into()))?;
                for batch in hashes.chunks(DIGESTS_PER_MESSAGE) {
                    let hex = batch.iter().map(|h| h.to_hex().to_string()).collect();
                    write_message(send, &W::digests(hex)).await.map_err(|e| frame_error(e, conn))?;
                }
                digests = Some(hashes);
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
                return Ok(Sent { report, digests, reply });
            }
        }
    }
    let reply = tokio::time::timeout(wait, messages.next())
        .await
        .unwrap_or(Err(FrameError::Timeout(wait)))
        .map_err(|e| frame_error(e, conn))?;
    Ok(Sent { report, digests, reply })
}

/// Adds a `Digests` batch to `have`, refusing more than `count` in all.
fn add_digests(
    have: &mut Vec<blake3::Hash>,
    more: Vec<blake3::Hash>,
    count: usize,
) -> Result<(), SessionError> {
    if have.len() + more.len() > count {
        return Err(SessionError::Protocol(format!(
            "{} digests for {count} files",
            have.len() + more.len()
        )));
    }
    have.extend(more);
    Ok(())
}

/// A receive running on the blocking pool ([`datapath::receive`]), with the hashes it reports
/// as soon as every byte is there, before its channels end.
pub(crate) struct Receiving {
    task: DataTask<Result<ReceivedExtents, DataError>>,
    /// `None` once heard, or once the receive ended without them.
    hashed: Option<oneshot::Receiver<Vec<blake3::Hash>>>,
}

/// The hook [`datapath::receive`] calls with the hashes.
pub(crate) type OnHashed<'a> = &'a (dyn Fn(&[blake3::Hash]) + Sync);

/// How the data of a [`Receiving`] arrived.
pub(crate) enum Arrival {
    /// The receive ended: its report and hashes.
    Ended(ReceivedExtents),
    /// Every byte is there and hashed; the channels still linger for their senders'
    /// shutdowns ([`Receiving::report`] waits for them).
    Hashed(Vec<blake3::Hash>),
}

impl Arrival {
    /// The hashes, and the report if the receive ended.
    pub(crate) fn split(self) -> (Vec<blake3::Hash>, Option<ChannelReport>) {
        match self {
            Arrival::Ended(received) => (received.hashes, Some(received.report)),
            Arrival::Hashed(hashes) => (hashes, None),
        }
    }
}

impl Receiving {
    /// Runs `receive` (a call of [`datapath::receive`] with the hook and the cancel flag it
    /// is given) on the blocking pool.
    pub(crate) fn spawn(
        receive: impl FnOnce(OnHashed<'_>, &AtomicBool) -> Result<ReceivedExtents, DataError>
        + Send
        + 'static,
    ) -> Self {
        let (tx, rx) = oneshot::channel();
        let tx = Mutex::new(Some(tx));
        let task = DataTask::spawn(move |cancel| {
            let hashed = |hashes: &[blake3::Hash]| {
                if let Some(tx) = tx.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    let _ = tx.send(hashes.to_vec());
                }
            };
            receive(&hashed, cancel)
        });
        Receiving { task, hashed: Some(rx) }
    }

    /// After [`Arrival::Hashed`], waits for the channels to end and returns their report; `None`
    /// if the receive ended already or failed after its data was all there.
    pub(crate) async fn report(&mut self) -> Option<ChannelReport> {
        match self.task.join().await {
            Ok(Ok(received)) => Some(received.report),
            _ => None,
        }
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

/// The receiving end while the data moves: runs `receiving` until its data is all there and
/// hashed (or it ended), keeping the `Digests` (at most `count`) that come meanwhile. Returns
/// how the data arrived and the digests so far. Any other message (the sender gave up, or
/// broke the protocol) stops the receive and is the error; so is a failed data channel.
pub(crate) async fn run_receiving<M: Control>(
    receiving: &mut Receiving,
    messages: &mut Messages<'_, M>,
    count: usize,
    conn: &quinn::Connection,
) -> Result<(Arrival, Vec<blake3::Hash>), SessionError> {
    let mut digests = Vec::new();
    loop {
        tokio::select! {
            done = receiving.task.join() => {
                let received = done?.map_err(|e| data_error(e, conn))?;
                return Ok((Arrival::Ended(received), digests));
            }
            hashes = reported(&mut receiving.hashed) => {
                return Ok((Arrival::Hashed(hashes), digests));
            }
            msg = messages.next() => {
                let heard = msg
                    .map_err(|e| frame_error(e, conn))
                    .and_then(M::into_digests)
                    .and_then(|more| add_digests(&mut digests, more, count));
                if let Err(err) = heard {
                    receiving.task.stop().await;
                    return Err(err);
                }
            }
        }
    }
}

/// The sender's `count` digests once the data is all there: `have` are those that came
/// already; the rest must come within `wait`.
pub(crate) async fn await_digests<M: Control>(
    messages: &mut Messages<'_, M>,
    mut have: Vec<blake3::Hash>,
    count: usize,
    conn: &quinn::Connection,
    wait: Duration,
) -> Result<Vec<blake3::Hash>, SessionError> {
    let deadline = tokio::time::Instant::now() + wait;
    while have.len() < count {
        match tokio::time::timeout_at(deadline, messages.next()).await {
            Ok(msg) => {
                let more = msg.map_err(|e| frame_error(e, conn)).and_then(M::into_digests)?;
                add_digests(&mut have, more, count)?;
            }
            Err(_) => {
                return Err(SessionError::Network(format!(
                    "the sender's Digests did not come within {} s of the last byte",
                    wait.as_secs_f64()
                )));
            }
        }
    }
    Ok(have)
}
