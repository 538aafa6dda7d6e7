//! Control messages on a QUIC stream: the role-typed messages of `sluice-session` and their
//! framing (a u32 big-endian length, then that many bytes of JSON), read and written on
//! streams, with a deadline on every read.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub use sluice_session::messages::*;
pub use sluice_session::negotiate::{cipher_from_name, cipher_name};

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The stream failed (the connection may have closed: ask it why).
    #[error("stream failed: {0}")]
    Io(#[from] std::io::Error),
    /// The peer finished the stream where a message was expected.
    #[error("the peer ended the stream without a message")]
    Eof,
    /// The bytes are not a frame of a message.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// No complete message before the deadline.
    #[error("no message within {0:?}")]
    Timeout(Duration),
}

/// Writes one message.
pub async fn write_message<W, T>(writer: &mut W, msg: &T) -> Result<(), FrameError>
where
    W: AsyncWrite + Unpin,
    T: Serialize,
{
    let frame = encode(msg)?;
    writer.write_all(&frame).await?;
    Ok(())
}

/// Reads one message, waiting at most `deadline` for all of it.
///
/// Not cancel-safe: a message half read when the future is dropped is lost, and the stream is
/// then out of step. Keep the future alive (pinned) across `select!` rounds.
pub async fn read_message<R, T>(reader: &mut R, deadline: Duration) -> Result<T, FrameError>
where
    R: AsyncRead + Unpin,
    T: DeserializeOwned,
{
    match tokio::time::timeout(deadline, read_frame(reader)).await {
        Ok(body) => Ok(serde_json::from_slice(&body?).map_err(CodecError::from)?),
        Err(_) => Err(FrameError::Timeout(deadline)),
    }
}

async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Vec<u8>, FrameError> {
    let mut len = [0u8; 4];
    match reader.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Eof),
        Err(e) => return Err(e.into()),
    }
    let len = frame_len(len)?;
    let mut body = vec![0u8; len];
    match reader.read_exact(&mut body).await {
        Ok(_) => Ok(body),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(FrameError::Eof),
        Err(e) => Err(e.into()),
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
