//! The data plane: one data channel over a real UDP socket, moving a byte range of a file.
//!
//! One thread (the caller's) drives one channel in a loop:
//! 1. receive what the socket holds, non-blocking and at most a bounded number per turn;
//! 2. fire the protocol's timers (`handle_timeout`);
//! 3. send everything the state machine has due (`poll_transmit` until `None`);
//! 4. wait until the state machine's next deadline or a datagram, whichever comes first: long
//!    waits sleep in `poll(2)` (at most [`MAX_SLEEP_US`] so `cancel` is seen within a few ms),
//!    short ones spin, because a sleeping thread wakes tens of microseconds late and pacing at
//!    hundreds of Mbit/s needs packets a few microseconds apart. The receiver, whose timers are
//!    coarse, sleeps through every wait, except that it keeps polling (yielding the core) for
//!    a moment after each datagram while data flows: waking a sleeping receiver for every
//!    datagram cost the sending side more than sending it, and halved loopback goodput.
//!
//! One reusable datagram buffer per channel, no allocation per packet. The sender reads the file
//! in blocks of [`READ_BLOCK_BYTES`] for new data (a retransmission reads just its packet); the
//! receiver gathers contiguous payloads into writes of up to [`WRITE_BLOCK_BYTES`]. File I/O runs
//! on the channel's thread: reads from the page cache are fast, but a disk that blocks stalls
//! the pacer for that long.
//!
//! A thread is woken late now and then (by the scheduler, or by another channel on the same
//! core); [`ChannelConfig::max_burst_pkts`] bounds how many packets the pacer may then send at
//! once to catch up. [`REAL_TIME_BURST_PKTS`] is a good value for real sockets.
//!
//! The datagrams move with plain `sendto`/`recvfrom`, one per packet; GSO and GRO batches belong
//! to the kernel datagram layer (`sluice-udp`), which this module does not use yet.
//!
//! # Endings
//! - The sender returns once every byte is acknowledged and its shutdown is sent.
//! - The receiver returns once every byte of its range arrived and then either the sender's
//!   shutdown came or a linger of max(3 RTT, 500 ms) passed, so the sender gets its final ACK.
//! - An empty range returns at once on both sides, without a packet.
//! - The protocol's `Broken` state (nothing heard for `idle_timeout_us`) is
//!   [`DataError::PeerSilent`]; `Closed` before the range is complete is
//!   [`DataError::ClosedEarly`]; `cancel` is [`DataError::Cancelled`]. A cancelled end sends
//!   nothing more (the protocol has no abort packet): its peer notices by its idle timeout.
//! - The final progress report comes on every ending, failures included; a failed receiver
//!   still writes out what it gathered.

use std::fs::File;
use std::net::{SocketAddr, UdpSocket};
use std::ops::Range;
use std::sync::atomic::AtomicBool;

use sluice_proto::config::ChannelConfig;
use sluice_proto::crypto::PacketKey;

mod blocks;
mod port;
mod recv;
mod send;
#[cfg(test)]
mod tests;

pub use blocks::{READ_BLOCK_BYTES, WRITE_BLOCK_BYTES};
pub use port::{MAX_SLEEP_US, SOCKET_BUFFER_BYTES};

/// A `max_burst_pkts` for channels on real sockets: enough catch-up for a thread woken some
/// hundred microseconds late at a few Gbit/s, small enough not to overflow a queue on the path.
pub const REAL_TIME_BURST_PKTS: u32 = 16;

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
    /// Total payload bytes of the range.
    pub total: u64,
}

/// What a finished channel did.
#[derive(Debug, Clone, Default)]
pub struct ChannelReport {
    /// Payload bytes moved.
    pub bytes: u64,
    /// Seconds from start to finish.
    pub seconds: f64,
    /// Data packets sent for the first time (sender) or accepted (receiver).
    pub data_pkts: u64,
    /// Data packets retransmitted (sender only).
    pub retransmitted_pkts: u64,
    /// Datagrams rejected (failed authentication or malformed).
    pub rejected_pkts: u64,
}

/// Why a channel failed.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// Nothing heard from the peer for the idle timeout.
    #[error("no data-channel packets from the peer for {0} s: the peer or the path is gone")]
    PeerSilent(u64),
    /// Reading or writing the file failed.
    #[error("file I/O failed: {0}")]
    File(#[source] std::io::Error),
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
}

/// Sends `range` of `file` (payload offsets are file offsets). Blocks until every byte is
/// acknowledged, the peer is silent for the idle timeout, or `cancel` is set.
pub fn send_file(
    params: ChannelParams,
    file: &File,
    range: Range<u64>,
    progress: &mut dyn FnMut(Progress),
    cancel: &AtomicBool,
) -> Result<ChannelReport, DataError> {
    if nothing_to_move(&params, &range, progress)? {
        return Ok(ChannelReport::default());
    }
    send::run(params, file, range, progress, cancel)
}

/// Receives `range` into `file` (written at the file offsets the packets carry). Blocks until
/// every byte arrived (then lingers briefly so the sender sees the final ACK), the peer is silent
/// for the idle timeout, or `cancel` is set.
pub fn receive_file(
    params: ChannelParams,
    file: &File,
    range: Range<u64>,
    progress: &mut dyn FnMut(Progress),
    cancel: &AtomicBool,
) -> Result<ChannelReport, DataError> {
    if nothing_to_move(&params, &range, progress)? {
        return Ok(ChannelReport::default());
    }
    recv::run(params, file, range, progress, cancel)
}

/// Checks the configuration; for an empty range, reports the (empty) progress once and says
/// there is nothing to move, so neither end sends a packet.
fn nothing_to_move(
    params: &ChannelParams,
    range: &Range<u64>,
    progress: &mut dyn FnMut(Progress),
) -> Result<bool, DataError> {
    params.config.validate()?;
    if range.end <= range.start {
        progress(Progress { bytes: 0, total: 0 });
        return Ok(true);
    }
    Ok(false)
}

/// Reports progress at most every 100 ms, and once at the end.
struct Reporter {
    total: u64,
    next_us: u64,
}

impl Reporter {
    const INTERVAL_US: u64 = 100_000;

    fn new(total: u64, now_us: u64) -> Self {
        Self { total, next_us: now_us + Self::INTERVAL_US }
    }

    fn tick(&mut self, now_us: u64, bytes: u64, progress: &mut dyn FnMut(Progress)) {
        if now_us >= self.next_us {
            progress(Progress { bytes, total: self.total });
            self.next_us = now_us + Self::INTERVAL_US;
        }
    }

    fn finish(&self, bytes: u64, progress: &mut dyn FnMut(Progress)) {
        progress(Progress { bytes, total: self.total });
    }
}

/// The idle timeout in whole seconds (rounded up), as [`DataError::PeerSilent`] reports it.
fn idle_secs(config: &ChannelConfig) -> u64 {
    config.idle_timeout_us.div_ceil(1_000_000)
}
