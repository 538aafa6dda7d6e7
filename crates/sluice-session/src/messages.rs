//! The session's messages, typed by who says them, and their framing: a u32 big-endian length,
//! then that many bytes of JSON.
//!
//! A request stream opens with the client's [`Request`]. `Stat` and `List` are answered with
//! [`Answer`]s; the handshake's `Hello` with `Welcome` or `Refused`. A `Get` or a `Put` then
//! becomes a transfer between two roles, whoever opened the stream: the end with the files says
//! [`SenderMsg`]s, the end that writes them says [`ReceiverMsg`]s. In an upload the client
//! sends and the server receives; in a download the other way round; in a third-party or
//! relayed transfer other drivers play the same roles with the same messages.
//!
//! Every role ends a request it gives up with `Failed { code, message }`, the same JSON object
//! in each enum (`{"type": "failed", ...}`), so an end that fails before it knows its role (a
//! request refused at once) answers with [`failed_frame`].
//!
//! A frame is at most [`MAX_MESSAGE_BYTES`]; a larger announced length is refused before any
//! allocation. Messages are tagged JSON objects (`{"type": "get", "path": "a/b"}`), so a newer
//! peer's unknown field is ignored and an unknown message type is a protocol error.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::manifest::Entry;
use crate::options::{Links, Overwrite};

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
    /// Over TCP: `max_channels` is a ceiling, and the sender starts with fewer streams
    /// carrying data and adds them while they help (the client asks for it when the user did
    /// not fix the count).
    #[serde(default)]
    pub grow_streams: bool,
}

/// The first message of a stream, from the client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    /// First message of a session, on the first stream.
    Hello {
        /// The client's protocol version.
        version: u32,
        /// The client's token.
        token: String,
        /// The client's proposal.
        spec: Spec,
        /// In place of a token: a grant of another server's, presented by a server reading
        /// for a third-party job (`token` is then empty). The server checks it against the
        /// certificate this end proved in TLS (`docs/third-party.md`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grant: Option<GrantClaim>,
    },
    /// Download files: the server becomes the sending role, the client the receiving one.
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
        /// The client's data sockets, bound and listening, one per channel it offered: the
        /// server starts the data right behind its manifest, to the first ports of these as
        /// many as the session's channels ([`crate::Sending::new_early`]), and the client's
        /// `Want` takes or declines it. Given when the destination holds nothing yet.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        udp_ports: Vec<u16>,
    },
    /// Upload files: the client becomes the sending role, the server the receiving one.
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
        /// The client started the data already, to the ports of the server's [`Offer`]
        /// ([`crate::Sending::new_early`]): the server's `Want` takes or declines it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        early: bool,
    },
    /// The entries of a directory (one level), or a file itself: answered with `Manifest`
    /// parts (each entry's path a single name).
    List {
        /// Path relative to the server's root.
        path: String,
    },
    /// Size, modification time and kind of a path.
    Stat {
        /// Path relative to the server's root.
        path: String,
    },
    /// A third-party transfer's source end (server A): a grant for the server whose
    /// certificate is `reader` to read `paths` (relative to this token's root) for one job.
    /// Answered with `Granted`.
    Grant {
        /// The reader's (server B's) fingerprint as the client pinned it (`SHA256:...`).
        reader: String,
        /// What it may read.
        paths: Vec<String>,
    },
    /// A third-party transfer's destination end (server B): read `paths` from the server at
    /// `source` with the grant, into `dest`, as a job that goes on without the client.
    /// Answered with `JobProgress` while it runs and `JobDone` or `Failed` at its end.
    Pull(PullJob),
    /// A relay's end of a relayed upload's hop: keep these sealed blocks (`relay` module).
    /// Answered with `HopMsg`s.
    Deposit(crate::relay::Deposit),
    /// A relay's end of a collection: send these blocks to their collector. Answered with
    /// `HopMsg`s.
    Collect(crate::relay::Collect),
    /// A relay's end of a collection that needs no data: delete these blocks unsent (the
    /// collector has them from another relay, `--relay-copies 2`); with no blocks named, the
    /// collector has every block: delete all of the transfer and take no more deposits of it.
    /// Answered with `HopMsg::Released`.
    Discard(crate::relay::Collect),
    /// A relayed upload's receiving end: collect the blocks the sender stripes. Followed by
    /// `StripeMsg`s, answered with `CollectMsg`s.
    Relayed(crate::relay::RelayedPut),
    /// A relayed download's sending end: stripe `path` over this server's relays for the
    /// client to collect. Answered with `StripeMsg`s (an `Offer` first), followed by
    /// `CollectMsg`s. Needs the read right.
    RelayedGet(crate::relay::RelayedGet),
    /// A relayed download's client in the striping: the next batch the server stripes to it
    /// directly. Answered with `HopMsg`s.
    Take(crate::relay::Take),
    /// The jobs this server runs, or ran lately, for the session's token (third-party pulls
    /// and relayed uploads' collections): answered with `Jobs`. Needs the write right.
    Jobs {},
    /// The round trips from this server to these relays (FSP 3.1: the receiver's side of
    /// relay selection, `sluice cp --relay-max-rtt-receiver`), each from a QUIC handshake that
    /// proves the fingerprint and asks nothing else: answered with `RelayRtts`. At most
    /// [`crate::relay::MAX_RELAYS`]; needs the write right (a relayed upload's).
    RelayRtts {
        /// The relays as the sender reached them (`address` and `fingerprint` of each
        /// [`crate::relay::RelaySpot`]; no capability).
        relays: Vec<crate::relay::RelayPeer>,
    },
    /// A relay's room: the bytes of blocks this token could deposit now (the spool's free room,
    /// and the token's quota's): answered with `SpoolRoom`. Needs the `relay` right. How the
    /// sender ranks relays by what they accept.
    SpoolRoom {},
    /// Cancel the session's token's job `id` (running or stalled): answered with `Jobs`
    /// listing that job once it ended. Needs the write right.
    CancelJob {
        /// The job's id as `Jobs` lists it.
        id: String,
    },
}

/// A grant as its reader presents it in `Hello`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantClaim {
    /// The grant exactly as its issuer gave it.
    pub grant: String,
    /// The job the reader reads for.
    pub job: String,
}

/// What a client asks of a third-party transfer's destination (server B).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullJob {
    /// The source server's address as the client reached it (`ip:port`): the only address B
    /// dials for this job.
    pub source: String,
    /// The source's fingerprint as the client pinned it: B completes the connection only if
    /// the source proves it.
    pub source_fingerprint: String,
    /// The source's grant (from its `Granted`).
    pub grant: String,
    /// The grant's job.
    pub job: String,
    /// Paths on the source, relative to the client's root there.
    pub paths: Vec<String>,
    /// Where, relative to this server's root for the client's token: into it when it is a
    /// directory, else the one source takes its name.
    pub dest: String,
    /// Directories with everything in them.
    #[serde(default)]
    pub recursive: bool,
    /// Symbolic links inside the trees.
    #[serde(default)]
    pub links: Links,
    /// Files that exist at the destination.
    #[serde(default)]
    pub overwrite: Overwrite,
    /// Compare existing files by BLAKE3.
    #[serde(default)]
    pub checksum: bool,
    /// Keep permission bits and modification times.
    #[serde(default)]
    pub preserve: bool,
    /// Compress at this zstd level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compress: Option<i32>,
    /// Plan only: nothing is written.
    #[serde(default)]
    pub dry_run: bool,
    /// The data channels' controller, cap and floor, and channel count, as B proposes them
    /// to A (the client's `cp` options).
    pub spec: Spec,
}

/// How far a third-party job has come.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobProgress {
    /// Bytes of the job's files at the destination, verified or arriving.
    pub bytes: u64,
    /// Bytes of the files that move (known once A's manifest is planned).
    pub total: u64,
    /// Files that move.
    pub files: u64,
}

/// The end of a third-party job, as B reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobDone {
    /// The job.
    pub job: String,
    /// Files moved (or that would).
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Bytes an earlier attempt left that were checked and kept.
    pub resumed: u64,
    /// Existing files replaced.
    pub replaced: u64,
    /// Existing files kept.
    pub kept: u64,
    /// BLAKE3 of the one file, when one moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blake3: Option<String>,
    /// A dry run's files that would move.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub planned: Vec<String>,
    /// Milliseconds the job's last attempt took.
    pub millis: u64,
    /// Whether this answer is of a job that was already running (the request attached to
    /// it) rather than one it started.
    #[serde(default)]
    pub attached: bool,
}

/// What kind of work a server's job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobKind {
    /// A third-party transfer's destination: it reads from another server (`Pull`).
    ThirdParty,
    /// A relayed upload's collection: it gathers the sender's blocks from relays (`Relayed`).
    Relayed,
}

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobPhase {
    /// It moves data, or waits to.
    Running,
    /// A relayed upload whose sender left with blocks nowhere to collect: the same copy run
    /// again moves only `missing`.
    Stalled,
    /// Ended with every file verified and in place.
    Done,
    /// Ended without its files; `error` says why.
    Failed,
    /// Cancelled by a client of its token (`CancelJob`): a third-party job's files stay as an
    /// interrupted download leaves them; a relayed upload's collected blocks are deleted.
    Cancelled,
}

/// One job as `sluice jobs` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobInfo {
    /// What it does.
    pub kind: JobKind,
    /// Its id: a third-party job's (the grant's), a relayed upload's transfer id.
    pub id: String,
    /// Where it reads from: the source server's address, or the relays' addresses.
    pub from: String,
    /// Where it writes, relative to the token's root.
    pub dest: String,
    /// Where it stands.
    pub phase: JobPhase,
    /// Bytes at the destination, verified or arriving.
    pub bytes: u64,
    /// Bytes of the files it moves (0 until known).
    pub total: u64,
    /// Files it moves (0 until known).
    #[serde(default)]
    pub files: u64,
    /// When it started, seconds since the Unix epoch (the server's clock).
    pub started: u64,
    /// When it ended or stalled, likewise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<u64>,
    /// A stalled job's missing byte ranges, `[start, end)` (the first
    /// [`MAX_JOB_RANGES`]; `missing_bytes` counts them all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<[u64; 2]>,
    /// Bytes a stalled job lacks.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub missing_bytes: u64,
    /// A failed or stalled job's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The most missing ranges a [`JobInfo`] lists.
pub const MAX_JOB_RANGES: usize = 32;

/// The most jobs a `Jobs` answer lists (the newest first), so that it fits in one frame.
pub const MAX_JOBS_LISTED: usize = 200;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What a server offers a new connection before its token is checked: the one message on the
/// one stream the server opens, sent with its first flight (QUIC's 0.5-RTT data), so that the
/// client's first upload can start its data with its `Hello` instead of a round trip after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    /// The session's id (32 hex digits), as `Welcome` will say it; part of the key context of
    /// the data channels.
    pub session_id: String,
    /// The most data channels a transfer may use here.
    pub max_channels: u32,
    /// Data sockets bound for the session's first upload, one per channel up to
    /// `max_channels` (empty when the server offers none: a client then waits for its
    /// `Want` as usual). A `Put` with `early` sends to the first of them, as many as the
    /// session's channels; their data is read only once the token is accepted and the
    /// upload planned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub udp_ports: Vec<u16>,
}

/// The server's answer to `Hello`, `Stat` and `List`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Answer {
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
    /// Answer to `Stat`.
    StatInfo(StatInfo),
    /// Part of the listing of a `List`.
    Manifest(ManifestPart),
    /// Answer to `Grant`.
    Granted {
        /// The grant's wire form, for the reader.
        grant: String,
        /// The job it is for.
        job: String,
        /// When it expires, seconds since the Unix epoch (the issuer's clock).
        expires_at: u64,
    },
    /// A running `Pull` job's progress (at most a few times a second).
    JobProgress(JobProgress),
    /// A `Pull` job ended with every file verified.
    JobDone(JobDone),
    /// Answer to `RelayRtts`: each relay's round trip in microseconds, in order; `None` where
    /// no handshake with the pinned fingerprint completed in time.
    RelayRtts {
        /// The round trips.
        rtt_us: Vec<Option<u64>>,
    },
    /// Answer to `SpoolRoom`.
    SpoolRoom {
        /// Bytes of sealed blocks this token could deposit now.
        bytes: u64,
    },
    /// Answer to `Jobs`: the token's jobs, running and stalled first, then those that ended
    /// lately, each group newest first.
    Jobs {
        /// The jobs.
        jobs: Vec<JobInfo>,
    },
    /// The request failed.
    Failed {
        /// Class of the failure.
        code: ErrorCode,
        /// For the user.
        message: String,
    },
}

/// A sender's start from path memory: the delivery rate it kept for the path, and how old.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathStart {
    /// Bits per second of UDP payload.
    pub rate_bps: u64,
    /// Seconds since it was kept.
    pub age_s: u64,
}

/// What the sending role says (the end with the files).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SenderMsg {
    /// Part of the manifest: what the transfer moves.
    Manifest(ManifestPart),
    /// The verdict on the receiver's resume offers (only when `Want` offered any).
    Resumed {
        /// `[file, bytes]`: the leading bytes of each offered file that match and stay.
        kept: Vec<[u64; 2]>,
    },
    /// The sender's data sockets are bound, and the data follows at once: after the
    /// receiver's `Ready` (and `Resumed`) when any byte is left to move, and again in a repair
    /// round after `Repairing` that names any block.
    Ready {
        /// Their UDP ports, one per negotiated channel, in channel order.
        udp_ports: Vec<u16>,
        /// The data starts from what the path delivered to an earlier transfer (path memory),
        /// for the receiver to tell its user; absent otherwise.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path_memory: Option<PathStart>,
    },
    /// BLAKE3 of each wanted file, in order, in one or more batches: sent when the sender's
    /// hashing is done, which may be before, during or after the data.
    Digests {
        /// The hashes, 64 hex digits each.
        blake3: Vec<String>,
    },
    /// The answer to the receiver's `Repair`: the blocks that differ, as `[file, block]`.
    Repairing {
        /// The blocks whose hashes differ from the receiver's, increasing.
        blocks: Vec<[u64; 2]>,
    },
    /// The sender gives up on this transfer.
    Failed {
        /// Class of the failure.
        code: ErrorCode,
        /// For the log and the user.
        message: String,
    },
}

/// What the receiving role says (the end that writes the files).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ReceiverMsg {
    /// The files of the manifest the receiver wants.
    Want(Want),
    /// The receiver's data sockets are bound and listening: right behind `Want` when any
    /// wanted file has bytes, and right behind each `Repair`.
    Ready {
        /// Their UDP ports, one per negotiated channel, in channel order.
        udp_ports: Vec<u16>,
    },
    /// Some files did not hash to the sender's BLAKE3: the blocks of each as the receiver has
    /// them. The sender answers `Repairing`.
    Repair {
        /// Each such file's block hashes.
        files: Vec<BlockHashes>,
    },
    /// The receiver has the files, verified and stored.
    Verified,
    /// The receiver gives up on this transfer.
    Failed {
        /// Class of the failure.
        code: ErrorCode,
        /// For the log and the user.
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
    /// A dry run: the choice is all the receiver wanted to know, and the transfer ends here.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// The receiver takes the data the sender started before this `Want` (its early phase 0,
    /// to the ports the receiver gave beforehand): every file, nothing to resume, and no
    /// `Ready` follows. Without it, an early start is void: the sender stops that data and
    /// the transfer goes on as if it had not started, on the restart phase.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub early: bool,
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

/// Class of a failure, as carried by `Refused` and `Failed`.
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

/// Why bytes are not a frame.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The announced length is above [`MAX_MESSAGE_BYTES`].
    #[error("message of {0} bytes is over the 1 MiB limit")]
    TooLarge(usize),
    /// The bytes end before the frame does, or go on after it.
    #[error("the frame's length does not match its bytes")]
    Length,
    /// The body is not a valid message.
    #[error("malformed message: {0}")]
    Json(#[from] serde_json::Error),
}

/// Encodes `msg` as one frame.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, CodecError> {
    let body = serde_json::to_vec(msg)?;
    if body.len() > MAX_MESSAGE_BYTES {
        return Err(CodecError::TooLarge(body.len()));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    // Fits: the length is at most MAX_MESSAGE_BYTES.
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// The body length a frame's 4-byte header announces, refused above [`MAX_MESSAGE_BYTES`].
pub fn frame_len(header: [u8; 4]) -> Result<usize, CodecError> {
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_MESSAGE_BYTES {
        return Err(CodecError::TooLarge(len));
    }
    Ok(len)
}

/// Decodes one whole frame (the inverse of [`encode`]): the length must be within the limit and
/// match the bytes that follow it exactly.
pub fn decode<T: DeserializeOwned>(frame: &[u8]) -> Result<T, CodecError> {
    let (len, body) = frame.split_first_chunk::<4>().ok_or(CodecError::Length)?;
    if body.len() != frame_len(*len)? {
        return Err(CodecError::Length);
    }
    Ok(serde_json::from_slice(body)?)
}

/// The frame of `Failed { code, message }`: what every role and [`Answer`] read as their own
/// `Failed`, for an end that fails before its role is known.
pub fn failed_frame(code: ErrorCode, message: &str) -> Vec<u8> {
    let failed = Answer::Failed { code, message: message.to_owned() };
    encode(&failed).unwrap_or_else(|_| {
        // Only a message over 1 MiB fails to encode: say so in fewer words.
        let short = Answer::Failed { code, message: "(a message over 1 MiB)".into() };
        encode(&short).unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_reads_the_same_in_every_role() {
        let frame = failed_frame(ErrorCode::Busy, "m");
        assert_eq!(
            decode::<SenderMsg>(&frame).unwrap(),
            SenderMsg::Failed { code: ErrorCode::Busy, message: "m".into() }
        );
        assert_eq!(
            decode::<ReceiverMsg>(&frame).unwrap(),
            ReceiverMsg::Failed { code: ErrorCode::Busy, message: "m".into() }
        );
        assert_eq!(
            decode::<Answer>(&frame).unwrap(),
            Answer::Failed { code: ErrorCode::Busy, message: "m".into() }
        );
    }

    #[test]
    fn ready_carries_a_start_from_path_memory_only_when_there_is_one() {
        let plain = SenderMsg::Ready { udp_ports: vec![7], path_memory: None };
        assert_eq!(&encode(&plain).unwrap()[4..], br#"{"type":"ready","udp_ports":[7]}"#);
        let start = PathStart { rate_bps: 900_000_000, age_s: 60 };
        let noted = SenderMsg::Ready { udp_ports: vec![7], path_memory: Some(start) };
        assert_eq!(decode::<SenderMsg>(&encode(&noted).unwrap()).unwrap(), noted);
        assert_eq!(decode::<SenderMsg>(&encode(&plain).unwrap()).unwrap(), plain);
    }

    #[test]
    fn frames_are_checked_before_they_are_parsed() {
        let frame = encode(&ReceiverMsg::Verified).unwrap();
        assert_eq!(&frame[4..], br#"{"type":"verified"}"#);
        assert!(matches!(decode::<ReceiverMsg>(&frame[..5]), Err(CodecError::Length)));
        let mut long = frame.clone();
        long.push(b' ');
        assert!(matches!(decode::<ReceiverMsg>(&long), Err(CodecError::Length)));
        let huge = ((MAX_MESSAGE_BYTES + 1) as u32).to_be_bytes();
        assert!(matches!(frame_len(huge), Err(CodecError::TooLarge(_))));
        assert!(matches!(decode::<SenderMsg>(&frame), Err(CodecError::Json(_))));
    }
}
