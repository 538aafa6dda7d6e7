//! The data plane over parallel TCP streams (FSP 3.2), for paths that block UDP: the same
//! contract as the UDP channels' [`send`](super::send) and [`receive`](super::receive), so a
//! session driver chooses channels or streams behind one call.
//!
//! - Work is shared as on the channels: the same chunk plan ([`sluice_session::chunks`]), taken
//!   first come first served, so a slow stream takes fewer chunks. A stream's pieces count as
//!   done when the receiver confirms it wrote them; a stream that dies (its socket fails, its
//!   peer goes silent for the idle timeout, a record fails its checks) hands the unconfirmed
//!   rest back and the other streams carry it. The transfer fails only when every stream died.
//! - Each stream carries sealed records ([`record`]): data records of one piece each (raw, or a
//!   compressed frame of [`compress`](super::compress)), the receiver's confirmations back.
//!   Records are sealed with the stream's [`ChannelKeys`], numbered per direction from 0, and
//!   accepted only in order: an altered, replayed, dropped or cut record fails the stream with
//!   [`DataError::Stream`] before a byte of it reaches the store.
//! - The receiving side is the channels' own: one shared file that writes each byte once and a
//!   thread that hashes the written prefix as it grows, so `hashed` and the hashes come as
//!   from [`receive`](super::receive).
//! - Buffers are right-sized from the receiver's measurements ([`buffers`]): the receiver sizes
//!   its receive buffer, the sender its send buffer on the receiver's word, each only where the
//!   kernel's own tuning falls short; a kernel that caps them is reported once
//!   ([`ChannelReport::buffer_notice`]).
//! - The rate is the kernel's congestion control per stream; the sender caps the transfer's
//!   payload rate with one schedule shared by its streams ([`StreamConfig::rate_bps`]).
//! - How many of the open streams carry data is the sender's choice ([`grow`]): a few at
//!   first, more while the aggregate grows and loss does not, fewer when the path is shared.
//!
//! Each stream runs on a thread of its own, non-blocking, waiting in `poll(2)`: a sender
//! queues records while the socket takes them and reads the confirmations between turns; a
//! receiver reads, writes payloads through a write-behind buffer, and confirms every MiB or
//! 5 ms. Progress is reported every 100 ms, and `cancel` stops every stream within a few ms.
//!
//! # Endings
//! - A sending stream ends once every byte of the transfer is confirmed (by it or the others):
//!   it sends a shutdown and closes. Until then a stream without chunks waits, in case a dying
//!   stream hands some back.
//! - A receiving stream ends when the range is complete and its sender's shutdown came (or the
//!   sender closed, or went silent for the idle timeout: the bytes are there either way).
//! - An empty range returns at once on both sides, without a byte on the streams.
//! - Nothing heard for the idle timeout (each end sends a keep-alive after a quarter of it of
//!   its own silence) is [`DataError::PeerSilent`]. A cancelled end tells its peer, which fails
//!   at once with [`DataError::Stream`]; so does an end that stops on an error of its own.

use std::net::TcpStream;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sluice_session::chunks::{CHUNK_BYTES, Plan};

use super::store::Store;
use super::{ChannelKeys, ChannelReport, DataError, Progress, ReceivedExtents};

mod buffers;
mod conn;
mod grow;
mod pace;
mod record;
mod recv;
mod send;

pub use grow::Growth;
pub use record::RECORD_DATA_BYTES;

/// Settings of one end of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamConfig {
    /// Nothing heard from the peer for this long fails the stream ([`DataError::PeerSilent`]).
    pub idle_timeout_us: u64,
    /// Sender: a cap on the payload rate of the whole transfer, all streams together, in bits
    /// per second; 0 for none. The first stream's setting counts.
    pub rate_bps: u64,
    /// Sender: the floor the caller asked for. TCP's rate is its congestion control's, so a
    /// floor cannot be held; a transfer that ran below it says so in a warning.
    pub min_rate_bps: u64,
    /// The round trip known before the streams start (the session's handshake), in
    /// microseconds, 0 if none: the receiver's right-sizing uses it until it measures one.
    pub rtt_hint_us: u64,
    /// Receiver: whether to right-size the streams' buffers ([`buffers`]); without it the
    /// kernel's own tuning alone sizes them (for comparison, or where a site pins them).
    pub right_size: bool,
    /// Sender: how the count of streams carrying data may change ([`grow`]).
    pub growth: Growth,
    /// Sender: streams carrying data at first under [`Growth::Adaptive`]; 0 for all.
    pub start_streams: u32,
}

impl Default for StreamConfig {
    fn default() -> Self {
        Self {
            idle_timeout_us: 10_000_000,
            rate_bps: 0,
            min_rate_bps: 0,
            rtt_hint_us: 0,
            right_size: true,
            growth: Growth::Fixed,
            start_streams: 0,
        }
    }
}

impl StreamConfig {
    /// The idle timeout in whole seconds (rounded up), as [`DataError::PeerSilent`] reports it.
    fn idle_secs(&self) -> u64 {
        self.idle_timeout_us.div_ceil(1_000_000)
    }
}

/// Everything one end of a TCP data stream needs.
#[derive(Debug)]
pub struct StreamParams {
    /// The connected stream (this end's). It is set non-blocking, with `TCP_NODELAY`.
    pub stream: TcpStream,
    /// This end's keys, for this stream alone: each direction numbers its records from 0, so
    /// keys that sealed anything before (a UDP channel's, another stream's) must not be given
    /// again.
    pub keys: ChannelKeys,
    /// Settings.
    pub config: StreamConfig,
}

/// A stream with nothing else to send sends a keep-alive after this much of its own silence,
/// so its peer's idle timeout runs only when it is gone.
fn keep_alive_every(idle: Duration) -> Duration {
    (idle / 4).min(Duration::from_secs(1))
}

/// Sends `ranges` of `store` (in order; offsets are the store's) over `streams`, with
/// `compress`, each piece compressed at that zstd level when it shrinks. Blocks until every
/// byte is confirmed written by the receiver, every stream failed, or `cancel` is set; the
/// same contract as [`send`](super::send).
pub fn send_streams(
    streams: Vec<StreamParams>,
    store: &dyn Store,
    ranges: &[Range<u64>],
    compress: Option<i32>,
    progress: &mut dyn FnMut(Progress),
    cancel: &AtomicBool,
) -> Result<ChannelReport, DataError> {
    let total: u64 = ranges.iter().map(|r| r.end.saturating_sub(r.start)).sum();
    if super::nothing_to_move(streams.len(), total, progress)? {
        return Ok(ChannelReport::default());
    }
    let (config, open) = (streams[0].config, streams.len());
    let mut grower = grow::Grower::new(config.growth, streams.len(), config.start_streams as _);
    // Copies of the sockets, to read their `TCP_INFO` for the grower (by index: a copy that
    // could not be made leaves its place empty); none when the count cannot change.
    let probes: Vec<Option<TcpStream>> = match grower.adapts() {
        true => streams.iter().map(|s| s.stream.try_clone().ok()).collect(),
        false => Vec::new(),
    };
    let ctx = send::SendShared {
        store,
        plan: Plan::new(ranges, CHUNK_BYTES),
        shared: super::transfer::Shared::default(),
        compress,
        pacer: pace::Pacer::new(config.rate_bps),
        sizer: buffers::Sizer::new(buffers::Side::Send),
        carrying: AtomicUsize::new(grower.active()),
        dead: AtomicU64::new(0),
    };
    let now = || Progress { bytes: ctx.plan.acked_bytes(), total, prefix: 0 };
    let mut sampled = Instant::now();
    let mut path_rtt = Duration::ZERO;
    let mut watch = |at: Instant| {
        if probes.is_empty() || at.duration_since(sampled) < grow::SAMPLE_EVERY {
            return;
        }
        sampled = at;
        let acked = ctx.plan.acked_bytes();
        let carrying = ctx.carrying.load(Ordering::Relaxed);
        let sample = grow::sample(&probes, carrying, acked, total - acked, at, &mut path_rtt);
        if let Some(n) = grower.sample(sample) {
            ctx.carrying.store(n, Ordering::Relaxed);
        }
    };
    let run = |index, params, start| send::stream(index, params, &ctx, start);
    let ends =
        super::transfer::supervise(streams, &ctx.shared, cancel, &now, progress, &mut watch, &run);
    tracing::debug!(
        open,
        peak = grower.peak(),
        last = grower.active(),
        "streams carrying data, at most and at the end"
    );
    let mut report = super::transfer::verdict(ends, ctx.plan.done(), &ctx.shared, cancel)?;
    report.bytes = ctx.plan.acked_bytes();
    report.buffer_notice = ctx.sizer.notice.take();
    below_floor(&report, config.min_rate_bps);
    Ok(report)
}

/// Receives `range` into `store` over `streams`, except the parts in `present`, and hashes
/// each extent of the range (ending at each of `ends`, the last `range.end`) as it is
/// written, the present parts included; `hashed` hears the hashes as soon as every byte is
/// written and hashed. The same contract as [`receive`](super::receive).
#[allow(clippy::too_many_arguments)] // each is a separate input of the one transfer
pub fn receive_streams(
    streams: Vec<StreamParams>,
    store: &dyn Store,
    range: Range<u64>,
    present: &[Range<u64>],
    ends: Vec<u64>,
    progress: &mut dyn FnMut(Progress),
    hashed: &(dyn Fn(&[blake3::Hash]) + Sync),
    cancel: &AtomicBool,
) -> Result<ReceivedExtents, DataError> {
    let ctx = super::recv::RecvShared::new(store, range, present);
    let sizer = buffers::Sizer::new(buffers::Side::Receive);
    let run = |index, params, start| recv::stream(index, params, &ctx, &sizer, start);
    let mut received = super::receive_over(streams, &ctx, ends, progress, hashed, cancel, &run)?;
    received.report.buffer_notice = sizer.notice.take();
    Ok(received)
}

/// Warns when the transfer ran below the floor asked for (which TCP cannot hold).
fn below_floor(report: &ChannelReport, min_rate_bps: u64) {
    let rate_bps = report.payload_bytes as f64 * 8.0 / report.seconds.max(1e-9);
    if min_rate_bps > 0 && rate_bps < min_rate_bps as f64 {
        tracing::warn!(
            rate_bps = rate_bps as u64,
            min_rate_bps,
            "the TCP streams moved less than the rate floor: over TCP the kernel's congestion \
             control sets the rate, and a floor cannot be held"
        );
    }
}
