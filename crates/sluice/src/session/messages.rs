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

use crate::tree::{Entry, Links, Overwrite};

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
    /// A floor for the transfer's sending rate when non-zero (bit/s).
    #[serde(default)]
    pub min_rate_bps: u64,
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
    /// Download files: the server answers with their `Manifest`, the client with `Want`.
    Get {
        /// Paths relative to the server's root (`.` is the root itself).
        paths: Vec<String>,
        /// Directories are copied with everything in them (else a directory is refused).
        #[serde(default)]
        recursive: bool,
        /// Symbolic links inside the trees.
        #[serde(default)]
        links: Links,
        /// Put each file's BLAKE3 in the manifest (the client compares by content).
        #[serde(default)]
        checksum: bool,
        /// Compress each piece that shrinks with zstd at this level (1 to 19).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        compress: Option<i32>,
    },
    /// Upload files: `Manifest` follows; the server answers with `Want`.
    Put {
        /// Where, relative to the server's root: into it when it is a directory, else the one
        /// top-level entry takes its name.
        dest: String,
        /// Files that exist at the destination.
        #[serde(default)]
        overwrite: Overwrite,
        /// Compare existing files by BLAKE3 (the manifest carries the client's).
        #[serde(default)]
        checksum: bool,
        /// Keep the client's permission bits and modification times.
        #[serde(default)]
        preserve: bool,
        /// Answer `Want` and stop: nothing is created.
        #[serde(default)]
        dry_run: bool,
    },
    /// Part of the manifest of a `Put`.
    Manifest(ManifestPart),
    /// The files of the server's manifest the client wants (a `Get`).
    Want(Want),
    /// The sender's verdict on the server's resume offers (a `Put`).
    Resumed {
        /// `[file, bytes]`: the leading bytes of each offered file that match and stay.
        kept: Vec<[u64; 2]>,
    },
    /// BLAKE3 of each file sent (a `Put`), in order, in one or more batches: sent when the
    /// client's hashing is done, which may be before, during or after the data.
    Digests {
        /// The hashes, 64 hex digits each.
        blake3: Vec<String>,
    },
    /// The entries of a directory (one level), or a file itself: the server answers with
    /// `Manifest` parts (each entry's path a single name).
    List {
        /// Path relative to the server's root.
        path: String,
    },
    /// Size, modification time and kind of a path.
    Stat {
        /// Path relative to the server's root.
        path: String,
    },
    /// The client's data sockets are bound and listening: in a download right behind `Want`
    /// when any wanted file has bytes (the server needs no other round trip before it sends);
    /// in an upload, the answer to the server's `Ready`.
    Ready {
        /// Their UDP ports, one per negotiated channel, in channel order (the address is the
        /// client's address on this connection).
        udp_ports: Vec<u16>,
    },
    /// The client received, verified and stored the files (Get).
    Verified,
    /// Some files of a `Get` did not hash to the server's BLAKE3: the blocks of each as the
    /// client has them. The server answers `Repairing`.
    Repair {
        /// Each such file's block hashes.
        files: Vec<BlockHashes>,
    },
    /// The client's answer to the server's `Repair` (a `Put`): the blocks it sends again, as
    /// `[file, block]`, then a new `Ready` exchange when there are any.
    Repairing {
        /// The blocks whose hashes differ from the server's.
        blocks: Vec<[u64; 2]>,
    },
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
    /// Part of the manifest of a `Get`, or of the listing of a `List`.
    Manifest(ManifestPart),
    /// The files of the client's manifest the server wants (a `Put`).
    Want(Want),
    /// The sender's verdict on the client's resume offers (a `Get`).
    Resumed {
        /// `[file, bytes]`: the leading bytes of each offered file that match and stay.
        kept: Vec<[u64; 2]>,
    },
    /// BLAKE3 of each file sent (a `Get`), in order, in one or more batches: sent when the
    /// server's hashing is done, which may be before, during or after the data.
    Digests {
        /// The hashes, 64 hex digits each.
        blake3: Vec<String>,
    },
    /// Answer to `Stat`.
    StatInfo(StatInfo),
    /// The server's data sockets are bound: after `Want` (and `Resumed`) when any byte is left
    /// to move. In a download the data follows at once.
    Ready {
        /// Their UDP ports, one per negotiated channel, in channel order.
        udp_ports: Vec<u16>,
    },
    /// The server received, verified and stored the files (Put).
    Verified,
    /// Some files of a `Put` did not hash to the client's BLAKE3: the blocks of each as the
    /// server has them. The client answers `Repairing`.
    Repair {
        /// Each such file's block hashes.
        files: Vec<BlockHashes>,
    },
    /// The server's answer to the client's `Repair` (a `Get`): the blocks it sends again, as
    /// `[file, block]`, then a new `Ready` exchange when there are any.
    Repairing {
        /// The blocks whose hashes differ from the client's.
        blocks: Vec<[u64; 2]>,
    },
    /// The request failed.
    Error {
        /// Class of the failure.
        code: ErrorCode,
        /// For the user.
        message: String,
    },
}

/// Part of a manifest: entries in order; the last part says so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestPart {
    /// The next entries.
    pub entries: Vec<Entry>,
    /// Whether the manifest ends here.
    pub last: bool,
}

/// The receiver's choice of the files of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Want {
    /// Numbers of the files that move (counting the manifest's files in order) as ranges
    /// `[start, end)`.
    pub files: Vec<[u32; 2]>,
    /// Existing files that will be replaced.
    #[serde(default)]
    pub replaced: u64,
    /// Existing files kept by the overwrite policy.
    #[serde(default)]
    pub kept: u64,
    /// Files an interrupted transfer left partly on disk: the sender answers `Resumed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resume: Vec<BlockHashes>,
}

/// BLAKE3 of a wanted file's 4 MiB blocks at the receiver: the leading blocks it has already
/// (a resume offer in `Want`), or all of a file that did not hash to the sender's BLAKE3 (in
/// `Repair`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockHashes {
    /// Which file, counting the wanted files in order from 0.
    pub file: u32,
    /// BLAKE3 of each 4 MiB block from the file's start, hex.
    pub blocks: Vec<String>,
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
    /// The data does not hash to the sender's `Digests`.
    Integrity,
    /// Some files were stored, others failed.
    Partial,
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

/// Decodes one whole frame (the inverse of [`encode`]): the length must be within the limit and
/// match the bytes that follow it exactly.
pub fn decode<T: DeserializeOwned>(frame: &[u8]) -> Result<T, FrameError> {
    let (len, body) = frame.split_first_chunk::<4>().ok_or(FrameError::Eof)?;
    let len = u32::from_be_bytes(*len) as usize;
    if len > MAX_MESSAGE_BYTES {
        return Err(FrameError::TooLarge(len));
    }
    if body.len() != len {
        return Err(FrameError::Eof);
    }
    Ok(serde_json::from_slice(body)?)
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
