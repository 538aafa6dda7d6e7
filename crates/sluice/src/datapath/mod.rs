//! The data plane: the data channels of one transfer over real UDP sockets, moving a byte
//! range of a file.
//!
//! A transfer runs N channels (MCDTP's parallel data channels), each with its own socket pair,
//! its own `sluice-proto` sender or receiver, and its own thread; the caller's thread
//! supervises them ([`transfer`]): it reports progress every 100 ms and passes `cancel` on.
//!
//! - Work is shared first come, first served ([`sluice_session::chunks`]): the range is cut into chunks of
//!   [`CHUNK_BYTES`]; a sending channel takes the next chunk whenever its queue runs low, so a
//!   slow channel takes fewer. If a channel dies (its peer silent for the idle timeout, a
//!   socket error), the unacknowledged rest of its chunks goes back to the plan and the other
//!   channels carry it; the transfer fails only when every channel has died.
//! - The channels share one rate budget: their controllers are members of one
//!   [`CouplingGroup`](sluice_proto::cc::coupled::CouplingGroup), so N channels are as fair to
//!   other traffic as one flow.
//! - On the receiving side every channel writes into the one file at the offsets the packets
//!   carry, and one shared record of what arrived (a chunk handed from a dead channel to another
//!   may arrive twice) says when the range is complete. Each byte goes to disk once (a second
//!   copy is dropped where the first is written).
//! - The receiver hashes the range while it arrives: a thread of its own reads back the
//!   contiguous prefix already written ([`written`]) and feeds BLAKE3, so when the last byte
//!   is on disk only the tail remains to hash. [`receive_file`] returns the hash.
//!
//! Each channel's thread drives its state machine in a loop:
//! 1. receive what the socket holds, one batch (`recvmmsg`, with GRO where the kernel has it);
//! 2. fire the protocol's timers (`handle_timeout`);
//! 3. send everything due, in batches of equal-sized datagrams (one GSO `sendmsg`, or
//!    `sendmmsg`, per batch; [`sluice_udp`]);
//! 4. wait until the next deadline or a datagram. The sender paces in small batches: it lets
//!    about 200 us of sending time accrue (at most one batch; on a slow channel 8 packets, up to
//!    2 ms) and sleeps in `poll(2)` until then; the pacer catches up after a late wake-up by at most
//!    [`ChannelConfig::max_burst_pkts`](sluice_proto::config::ChannelConfig::max_burst_pkts)
//!    packets, which corrects the period from the real send rate. Waits under 60 us spin. The
//!    receiver, whose timers are coarse, sleeps until a datagram comes; while data flows it
//!    takes turns of 200 us (drain up to 16 batches, sleep; on a slow channel long enough for
//!    about 8 datagrams, up to 800 us), so it is not woken per datagram.
//!    Every datagram carries the kernel's receive time, so the batching does not blur the
//!    intervals the estimators measure.
//!
//! No allocation per packet: each channel has fixed datagram buffers. The sender reads the
//! file in blocks of [`READ_BLOCK_BYTES`] for new data (a retransmission reads just its
//! packet); the receiver gathers contiguous payloads into writes of up to
//! [`WRITE_BLOCK_BYTES`]. File I/O runs on the channel's thread: reads from the page cache are
//! fast, but a disk that blocks stalls that channel's pacer for that long.
//!
//! # Endings
//! - A sending channel ends once every byte of the transfer is acknowledged (by it or the
//!   others) and its shutdown is sent; one without chunks waits, keeping its channel alive, in
//!   case a dying channel hands chunks back.
//! - A receiving channel ends once the whole range arrived and then either its sender's
//!   shutdown came or a linger of max(3 RTT, 500 ms) passed, so the sender gets its final ACK.
//! - An empty range returns at once on both sides, without a packet.
//! - A channel's `Broken` state (nothing heard for `idle_timeout_us`) is
//!   [`DataError::PeerSilent`], or [`DataError::NothingThrough`] when nothing was ever heard
//!   (the sender got no packet back, the receiver no data packet: a blocked port, or a path that
//!   carries not even the datagrams a channel starts with); `Closed` before the range is complete
//!   is [`DataError::ClosedEarly`]. These end the transfer only when no channel is left.
//!   `cancel` is [`DataError::Cancelled`]; a file error ends the whole transfer. A cancelled
//!   end sends nothing more (the protocol has no abort packet): its peer notices by its idle
//!   timeout.
//! - The final progress report comes on every ending, failures included; a failed receiver
//!   still writes out what it gathered.

use std::fs::File;
use std::net::{SocketAddr, UdpSocket};
use std::ops::Range;
use std::sync::atomic::AtomicBool;

use sluice_proto::cc::coupled::CouplingGroup;
use sluice_proto::config::ChannelConfig;
use sluice_proto::crypto::PacketKey;

mod blocks;
mod carrier;
mod port;
mod recv;
mod send;
mod store;
pub mod tcp;
#[cfg(test)]
mod tests;
mod transfer;
mod written;

pub use blocks::{READ_BLOCK_BYTES, WRITE_BLOCK_BYTES};
pub use carrier::{Carrier, Pieces, receive_carried};
pub use port::{MAX_SLEEP_US, SOCKET_BUFFER_BYTES};
pub use sluice_session::chunks::CHUNK_BYTES;
pub use sluice_session::compress::{COMPRESS_BLOCK_BYTES, LEVELS as COMPRESS_LEVELS};
pub use store::{Fault, Faulty, Store, read_exact_at, read_up_to, write_all_at};

/// A `max_burst_pkts` for channels on real sockets: room for one send batch plus as much again
/// of catch-up for a thread woken late, small enough (93 kB of 1452-byte packets) for the queue
/// of any path that carries these rates. With 16, a channel paced in batches of 16 could send
/// no faster than 16 packets per wake-up: ~600 Mbit/s on this machine whatever its rate said.
pub const REAL_TIME_BURST_PKTS: u32 = 256;

/// The two keys of one end of a data channel.
#[derive(Debug)]
pub struct ChannelKeys {
    /// Seals what this end sends.
    pub seal: PacketKey,
    /// Opens what the peer sends.
    pub open: PacketKey,
}

/// Everything one end of a data channel needs.
#[derive(Debug)]
pub struct ChannelParams {
    /// Protocol settings (both ends must agree on `initial_dsn` and `packet_size`).
    pub config: ChannelConfig,
    /// This end's keys.
    pub keys: ChannelKeys,
    /// A bound UDP socket (this end's).
    pub socket: UdpSocket,
    /// The peer's data socket address.
    pub peer: SocketAddr,
}

/// Progress of a running channel, reported at most every 100 ms and once at the end.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    /// Payload bytes acknowledged (sender) or received (receiver) so far.
    pub bytes: u64,
    /// Total payload bytes to move.
    pub total: u64,
    /// Receiver: the end of the run of bytes on disk from the range's start, without a gap
    /// (what a resumed transfer can keep); sender: 0.
    pub prefix: u64,
}

/// What a finished transfer's channels did, summed over the channels.
#[derive(Debug, Clone, Default)]
pub struct ChannelReport {
    /// Bytes of the range moved.
    pub bytes: u64,
    /// Payload bytes on the wire for them, retransmissions not counted: fewer than `bytes`
    /// when pieces were compressed.
    pub payload_bytes: u64,
    /// Seconds from start to finish.
    pub seconds: f64,
    /// Data packets sent for the first time (sender) or accepted (receiver).
    pub data_pkts: u64,
    /// Data packets retransmitted (sender only).
    pub retransmitted_pkts: u64,
    /// Datagrams rejected (failed authentication or malformed).
    pub rejected_pkts: u64,
    /// Data channels the transfer ran.
    pub channels: u32,
    /// Channels that failed while the others completed the transfer.
    pub lost_channels: u32,
    /// Channels or streams that carried data: over TCP the sender may keep some of the open
    /// streams idle ([`tcp`]'s growth of the stream count).
    pub carrying: u32,
    /// What the user should set when the kernel held socket buffers below what the path needs
    /// (TCP streams only, [`tcp`]); said once per transfer.
    pub buffer_notice: Option<String>,
    /// The least RTT a sending channel measured (sender over UDP only).
    pub min_rtt_us: Option<u64>,
    /// Data packets reported lost for the first time (sender over UDP only).
    pub lost_pkts: u64,
    /// What the path was seen to deliver, bits per second of UDP payload, once the sending
    /// controller settled on it (what path memory keeps; sender over UDP only).
    pub path_rate_bps: Option<u64>,
    /// The transfer started from path memory: what the path delivered before, and how long
    /// ago (sender over UDP only; `crate::session::path_memory`).
    pub memory_start: Option<MemoryStart>,
}

/// A sending start from path memory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryStart {
    /// The remembered delivery rate, bits per second of UDP payload (the start is
    /// `sluice_proto`'s share of it).
    pub rate_bps: u64,
    /// The record's age.
    pub age: std::time::Duration,
}

/// What a finished receive did.
#[derive(Debug, Clone)]
pub struct Received {
    /// The channels' report.
    pub report: ChannelReport,
    /// BLAKE3 of the range's bytes as they are in the file (for a range covering the whole
    /// file, the file's BLAKE3).
    pub blake3: blake3::Hash,
}

/// What a finished receive of several extents did.
#[derive(Debug, Clone)]
pub struct ReceivedExtents {
    /// The channels' report.
    pub report: ChannelReport,
    /// BLAKE3 of each extent's bytes as they are in the store, in order.
    pub hashes: Vec<blake3::Hash>,
}

/// Why a channel failed.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// Nothing heard from the peer for the idle timeout.
    #[error("no data-channel packets from the peer for {0} s: the peer or the path is gone")]
    PeerSilent(u64),
    /// Nothing got through on the channel from its start to the idle timeout: the sender heard
    /// nothing back, or the receiver got no data packet. The session's own connection got
    /// through to the same host, so this is the data path: blocked UDP ports, or a path that
    /// does not carry even the datagrams the channel starts with (at most
    /// [`sluice_proto::pmtu::BASE_PACKET_SIZE`]; a larger packet size is used only once a probe
    /// of it got through, see `sluice_proto::pmtu`).
    #[error(
        "nothing got through in {secs} s: UDP to the data ports is blocked (a firewall between \
         the hosts?), or the path does not carry even {packet_bytes}-byte datagrams (try a \
         smaller --packet-size)"
    )]
    NothingThrough {
        /// The idle timeout in whole seconds.
        secs: u64,
        /// The size of the datagrams the channel starts with.
        packet_bytes: usize,
    },
    /// Reading or writing the file failed.
    #[error("file I/O failed: {0}")]
    File(#[source] std::io::Error),
    /// Reading the received bytes back to hash them failed.
    #[error("reading the received bytes back to hash them failed: {0}")]
    Hash(#[source] std::io::Error),
    /// The socket failed.
    #[error("data socket failed: {0}")]
    Socket(#[source] std::io::Error),
    /// The caller cancelled.
    #[error("cancelled")]
    Cancelled,
    /// The configuration was refused.
    #[error("{0}")]
    Config(#[from] sluice_proto::config::ConfigError),
    /// The peer closed the channel before the range was complete.
    #[error("the peer closed the data channel early (reason {0})")]
    ClosedEarly(u32),
    /// The path does not carry datagrams of the packet size: the kernel's path MTU says so at
    /// the start, or a send failed with `EMSGSIZE`.
    #[error(
        "the path does not carry {packet_bytes}-byte UDP datagrams{}",
        match (max_bytes, path_mtu) {
            (Some(max), Some(mtu)) => format!(
                " (path MTU {mtu}: at most {max} bytes): choose --packet-size {max} or less"
            ),
            _ => ": choose a smaller --packet-size".to_owned(),
        }
    )]
    PacketTooLarge {
        /// The packet size the channel was given.
        packet_bytes: usize,
        /// The largest datagram the path carries, when the kernel knows its MTU.
        max_bytes: Option<usize>,
        /// The path MTU, when the kernel knows it.
        path_mtu: Option<usize>,
    },
    /// A compressed frame from the peer broke the rules or did not decompress.
    #[error("a compressed block from the peer is broken: {0}")]
    Compression(String),
    /// No channels were given.
    #[error("a transfer needs at least one data channel")]
    NoChannels,
    /// A TCP data stream ([`tcp`]) broke: a record failed authentication, came out of order or
    /// was cut short, or the peer closed the stream before the end (and said why).
    #[error("data stream: {0}")]
    Stream(String),
}

/// Sends `range` of `file` (payload offsets are file offsets) over `channels`. Blocks until
/// every byte is acknowledged, every channel failed, or `cancel` is set.
pub fn send_file(
    channels: Vec<ChannelParams>,
    file: &File,
    range: Range<u64>,
    progress: &mut dyn FnMut(Progress),
    cancel: &AtomicBool,
) -> Result<ChannelReport, DataError> {
    send(channels, file, &[range], None, progress, cancel)
}

/// Sends `ranges` of `store` (in order; payload offsets are the store's offsets) over
/// `channels`, with `compress`, each piece compressed at that zstd level when it shrinks.
/// Blocks until every byte is acknowledged, every channel failed, or `cancel` is set.
pub fn send(
    channels: Vec<ChannelParams>,
    store: &dyn Store,
    ranges: &[Range<u64>],
    compress: Option<i32>,
    progress: &mut dyn FnMut(Progress),
    cancel: &AtomicBool,
) -> Result<ChannelReport, DataError> {
    let total: u64 = ranges.iter().map(|r| r.end.saturating_sub(r.start)).sum();
    if nothing_to_move(channels.len(), total, progress)? {
        return Ok(ChannelReport::default());
    }
    validate(&channels)?;
    let packet_bits = channels[0].config.packet_size as f64 * 8.0;
    let ctx = send::SendShared {
        store,
        end: ranges.iter().map(|r| r.end).max().unwrap_or(0),
        plan: sluice_session::chunks::Plan::new(ranges, CHUNK_BYTES),
        group: CouplingGroup::new(&channels[0].config, channels.len()),
        shared: transfer::Shared::default(),
        compress,
    };
    let now = || Progress { bytes: ctx.plan.acked_bytes(), total, prefix: 0 };
    let run = |index, params, start| send::channel(index, params, &ctx, start);
    let ends =
        transfer::supervise(channels, &ctx.shared, cancel, &now, progress, &mut |_| {}, &run);
    let mut report = transfer::verdict(ends, ctx.plan.done(), &ctx.shared, cancel)?;
    report.bytes = ctx.plan.acked_bytes();
    let path_pps = ctx.group.path_rate_pps();
    report.path_rate_bps = (path_pps > 0.0).then_some((path_pps * packet_bits) as u64);
    Ok(report)
}

/// Receives `range` into `file` (written at the file offsets the packets carry) over
/// `channels`, hashing the range on a thread of its own as it is written. Blocks until every
/// byte arrived and is hashed (each channel lingers briefly so its sender sees the final ACK),
/// every channel failed, or `cancel` is set.
pub fn receive_file(
    channels: Vec<ChannelParams>,
    file: &File,
    range: Range<u64>,
    progress: &mut dyn FnMut(Progress),
    cancel: &AtomicBool,
) -> Result<Received, DataError> {
    let ends = vec![range.end.max(range.start)];
    let received = receive(channels, file, range, &[], ends, progress, &|_| {}, cancel)?;
    let blake3 = received.hashes.first().copied().unwrap_or_else(|| blake3::hash(b""));
    Ok(Received { report: received.report, blake3 })
}

/// Receives `range` into `store` over `channels`, except the parts in `present` (already in
/// the store: a resumed transfer's), and hashes each extent of the range (one from
/// `range.start` to `ends[0]`, the next to `ends[1]`, ...; `ends` increasing, the last
/// `range.end`) on a thread of its own as it is written, the present parts included. Blocks
/// like [`receive_file`].
///
/// `hashed` hears the hashes from the hashing thread as soon as every byte is in the store and
/// hashed, while the channels still linger for their senders' shutdowns (a round trip or
/// more): the caller can answer its peer that much sooner.
#[allow(clippy::too_many_arguments)] // each is a separate input of the one transfer
pub fn receive(
    channels: Vec<ChannelParams>,
    store: &dyn Store,
    range: Range<u64>,
    present: &[Range<u64>],
    ends: Vec<u64>,
    progress: &mut dyn FnMut(Progress),
    hashed: &(dyn Fn(&[blake3::Hash]) + Sync),
    cancel: &AtomicBool,
) -> Result<ReceivedExtents, DataError> {
    let ctx = recv::RecvShared::new(store, range.clone(), present);
    if ctx.missing() > 0 {
        validate(&channels)?;
    }
    let run = |index, params, start| recv::channel(index, params, &ctx, start);
    receive_over(channels, &ctx, ends, progress, hashed, cancel, &run)
}

/// The receiving side of any transport: runs `run` for each of `channels` into `ctx` (the
/// range's shared file and record of what arrived), with the hashing thread beside them, and
/// gives the verdict. Everything [`receive`] promises about endings, hashes and progress.
#[allow(clippy::too_many_arguments)] // receive's inputs, and the transport's loop
fn receive_over<P: Send>(
    channels: Vec<P>,
    ctx: &recv::RecvShared<'_>,
    ends: Vec<u64>,
    progress: &mut dyn FnMut(Progress),
    hashed: &(dyn Fn(&[blake3::Hash]) + Sync),
    cancel: &AtomicBool,
    run: &(dyn Fn(usize, P, std::time::Instant) -> transfer::ChannelEnd + Sync),
) -> Result<ReceivedExtents, DataError> {
    let total = ctx.missing();
    if nothing_to_move(channels.len(), total, progress)? {
        // Nothing moves, but what is present is hashed.
        ctx.file.finish(true);
        let hashes = match ctx.file.hash_written(ends, cancel) {
            Ok(Some(hashes)) => hashes,
            Ok(None) => return Err(DataError::Cancelled),
            Err(e) => return Err(DataError::Hash(e)),
        };
        return Ok(ReceivedExtents { report: ChannelReport::default(), hashes });
    }
    let now = || Progress { bytes: ctx.bytes(), total, prefix: ctx.file.prefix() };
    let (ends, hashed) = std::thread::scope(|s| {
        let hasher = std::thread::Builder::new()
            .name("sluice-hash".into())
            .spawn_scoped(s, || match ctx.file.hash_written(ends, cancel) {
                Ok(hash) => {
                    if let Some(hashes) = &hash {
                        hashed(hashes);
                    }
                    hash
                }
                Err(e) => {
                    // No use receiving what cannot be verified.
                    ctx.shared.fatal(DataError::Hash(e));
                    None
                }
            })
            .map_err(DataError::Hash)?;
        // The hasher must hear the end on every path, a panicking channel's included.
        let ending = EndOnDrop(&ctx.file);
        let ends =
            transfer::supervise(channels, &ctx.shared, cancel, &now, progress, &mut |_| {}, run);
        ctx.file.finish(ctx.complete());
        drop(ending);
        let hashed = hasher
            .join()
            .map_err(|_| DataError::Hash(std::io::Error::other("the hashing thread panicked")))?;
        Ok::<_, DataError>((ends, hashed))
    })?;
    let mut report = transfer::verdict(ends, ctx.complete(), &ctx.shared, cancel)?;
    report.bytes = ctx.bytes();
    report.rejected_pkts += ctx.out_of_range();
    // Complete, so the hasher read everything unless it was cancelled.
    let hashes = hashed.ok_or(DataError::Cancelled)?;
    Ok(ReceivedExtents { report, hashes })
}

/// Tells the hasher the transfer ended incomplete, unless it heard otherwise first.
struct EndOnDrop<'a, 'f>(&'a written::SharedFile<'f>);

impl Drop for EndOnDrop<'_, '_> {
    fn drop(&mut self) {
        self.0.finish(false);
    }
}

/// With no byte to move, reports the (empty) progress once and says there is nothing to move,
/// so neither end sends a packet (and no channel is needed); else checks there are channels.
fn nothing_to_move(
    channels: usize,
    total: u64,
    progress: &mut dyn FnMut(Progress),
) -> Result<bool, DataError> {
    if total == 0 {
        progress(Progress { bytes: 0, total: 0, prefix: 0 });
        return Ok(true);
    }
    if channels == 0 {
        return Err(DataError::NoChannels);
    }
    Ok(false)
}

/// Checks each channel's protocol settings.
fn validate(channels: &[ChannelParams]) -> Result<(), DataError> {
    for params in channels {
        params.config.validate()?;
    }
    Ok(())
}

/// A channel's waits for its peer in whole seconds (rounded up), as its errors report them.
#[derive(Debug, Clone, Copy)]
struct Waits {
    /// The idle timeout ([`DataError::PeerSilent`]).
    idle_secs: u64,
    /// The wait for the peer's first packet ([`DataError::NothingThrough`]).
    first_contact_secs: u64,
}

fn waits(config: &ChannelConfig) -> Waits {
    Waits {
        idle_secs: config.idle_timeout_us.div_ceil(1_000_000),
        first_contact_secs: config.first_contact_wait_us().div_ceil(1_000_000),
    }
}
