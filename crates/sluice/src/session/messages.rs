//! Control messages and their framing: a u32 big-endian length, then that many bytes of JSON.
//!
//! A frame is at most [`MAX_MESSAGE_BYTES`]; a larger announced length is refused before any
//! allocation. Every read has a deadline. Messages are tagged JSON objects
//! (`{"type": "get", "path": "a/b"}`), so a newer peer's unknown field is ignored and an unknown
//! message type is a protocol error.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use sluice_proto::crypto::Algorithm;

/// The largest frame body accepted or sent.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;

/// What the client proposes and the server chooses for the session's data channels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    /// Data channels per transfer: the client's limit in `Hello`, the chosen count in `Welcome`.
    pub max_channels: u32,
    /// Largest UDP payload of a data packet, in bytes.
    pub packet_size: u32,
    /// Congestion controller name (`udt`, `fixed`, `adaptive`).
    pub cc: String,
    /// AEAD name (`aes-256-gcm`, `chacha20-poly1305`).
    pub cipher: String,
    /// Rate of the `fixed` controller and a cap for the others when non-zero (bit/s).
    #[serde(default)]
    pub rate_bps: u64,
}

/// Message of the client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMsg {
    /// First message of a session, on the first stream.
    Hello {
        /// [`super::PROTOCOL_VERSION`] of the client.
        version: u32,
        /// The client's token.
        token: String,
        /// The client's proposal.
        spec: Spec,
    },
    /// Download a file.
    Get {
        /// Path relative to the server's root.
        path: String,
    },
    /// Upload a file.
    Put {
        /// Path relative to the server's root (its parent must exist).
        path: String,
        /// Size in bytes.
        size: u64,
    },
    /// BLAKE3 of the `size` bytes the client sends (Put), hex: sent once, when the client's
    /// hash is done, which may be before, during or after the data.
    Digest {
        /// The hash, 64 hex digits.
        blake3: String,
    },
    /// Size, modification time and kind of a path.
    Stat {
        /// Path relative to the server's root.
        path: String,
    },
    /// The client's data sockets are bound and listening.
    Ready {
        /// Their UDP ports, one per negotiated channel, in channel order (the address is the
        /// client's address on this connection).
        udp_ports: Vec<u16>,
    },
    /// The client received and verified the file (Get).
    Verified,
    /// The client gives up on this request.
    Failed {
        /// Class of the failure.
        code: ErrorCode,
        /// For the log.
        message: String,
    },
}

/// Message of the server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMsg {
    /// The session is accepted.
    Welcome {
        /// Random identifier of the session (32 hex digits); part of the key context.
        session_id: String,
        /// The chosen specification (`max_channels` is the channel count).
        spec: Spec,
    },
    /// The session is refused; the server closes the connection.
    Refused {
        /// Why.
        code: ErrorCode,
        /// For the user.
        message: String,
    },
    /// The file of a `Get`: the data channel will carry it.
    FileInfo {
        /// Size in bytes.
        size: u64,
        /// Modification time, seconds since the Unix epoch.
        mtime: i64,
        /// The server's data ports, one per negotiated channel, in channel order (the address
        /// is the server's address on this connection).
        udp_ports: Vec<u16>,
    },
    /// BLAKE3 of the `size` bytes the server sends (Get), hex: sent once, when the server's
    /// hash is done, which may be before, during or after the data.
    Digest {
        /// The hash, 64 hex digits.
        blake3: String,
    },
    /// Answer to `Stat`.
    StatInfo(StatInfo),
    /// The server's data sockets for a `Put` are bound.
    Ready {
        /// Their UDP ports, one per negotiated channel, in channel order.
        udp_ports: Vec<u16>,
    },
    /// The server received, verified and stored the file (Put).
    Verified,
    /// The request failed.
    Error {
        /// Class of the failure.
        code: ErrorCode,
        /// For the user.
        message: String,
    },
}

/// What a `Stat` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatInfo {
    /// Size in bytes.
    pub size: u64,
    /// Modification time, seconds since the Unix epoch.
    pub mtime: i64,
    /// What the path is.
    pub kind: FileKind,
}

/// Kind of a path on the server (symbolic links are followed inside the root).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// Anything else (device, socket, FIFO).
    Other,
}

/// Class of a failure, as carried by `Refused`, `Error` and `Failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorCode {
    /// Missing or wrong token.
    Auth,
    /// The path does not exist.
    NotFound,
    /// The path is outside the root, or the request is not allowed.
    Refused,
    /// A file operation failed.
    Io,
    /// The data does not hash to the sender's `Digest`.
    Integrity,
    /// No capacity for another transfer now.
    Busy,
    /// The data channel failed.
    Network,
    /// A message broke the protocol.
    Protocol,
}

/// Names of the AEADs in the handshake.
pub fn cipher_name(alg: Algorithm) -> &'static str {
    match alg {
        Algorithm::Aes256Gcm => "aes-256-gcm",
        Algorithm::ChaCha20Poly1305 => "chacha20-poly1305",
    }
}

/// Parses a name given by [`cipher_name`].
pub fn cipher_from_name(name: &str) -> Option<Algorithm> {
    match name {
        "aes-256-gcm" => Some(Algorithm::Aes256Gcm),
        "chacha20-poly1305" => Some(Algorithm::ChaCha20Poly1305),
        _ => None,
    }
}

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The stream failed (the connection may have closed: ask it why).
    #[error("stream failed: {0}")]
    Io(#[from] std::io::Error),
    /// The peer finished the stream where a message was expected.
    #[error("the peer ended the stream without a message")]
    Eof,
    /// The announced length is above [`MAX_MESSAGE_BYTES`].
    #[error("message of {0} bytes is over the 1 MiB limit")]
    TooLarge(usize),
    /// The body is not a valid message.
    #[error("malformed message: {0}")]
    Json(#[from] serde_json::Error),
    /// No complete message before the deadline.
    #[error("no message within {0:?}")]
    Timeout(Duration),
}

/// Encodes `msg` as one frame.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let body = serde_json::to_vec(msg)?;
    if body.len() > MAX_MESSAGE_BYTES {
        return Err(FrameError::TooLarge(body.len()));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    // Fits: the length is at most MAX_MESSAGE_BYTES.
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
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
        Ok(body) => Ok(serde_json::from_slice(&body?)?),
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
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_MESSAGE_BYTES {
        return Err(FrameError::TooLarge(len));
    }
    let mut body = vec![0u8; len];
    match reader.read_exact(&mut body).await {
        Ok(_) => Ok(body),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(FrameError::Eof),
        Err(e) => Err(e.into()),
    }
}
