//! The sending end of a stream: one thread each, fed chunk by chunk from the shared
//! [`Plan`], as the UDP channels are.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sluice_proto::wire::Kind;
use sluice_session::chunks::{Plan, Taken};

use super::super::store::{Store, read_exact_at};
use super::super::transfer::{ChannelEnd, Shared};
use super::super::{ChannelReport, DataError};
use super::buffers::Sizer;
use super::conn::Conn;
use super::pace::Pacer;
use super::record::{REASON_BROKEN, REASON_CANCELLED, REASON_DONE, Record, shutdown_error};
use super::{StreamParams, keep_alive_every};
use sluice_session::compress::{COMPRESS_BLOCK_BYTES, COMPRESSED, Deflater};

/// How often a stream traces its counters ([`Run::trace`]), as a UDP channel does.
const TRACE_EVERY: Duration = Duration::from_millis(250);

/// Bytes of records a stream queues per turn of its loop at most, before it reads the ACKs.
const TURN_BYTES: usize = 4 << 20;
/// Longest sleep: how soon a stream with nothing to send sees the plan done or `stop`.
const MAX_SLEEP: Duration = Duration::from_millis(5);
/// Bytes of the ACK reader's buffer (ACKs are small).
const INPUT_BYTES: usize = 64 << 10;

/// What every sending stream of a transfer shares.
pub(super) struct SendShared<'a> {
    pub(super) store: &'a dyn Store,
    pub(super) plan: Plan,
    pub(super) shared: Shared,
    /// zstd level of per-piece compression, if any.
    pub(super) compress: Option<i32>,
    pub(super) pacer: Pacer,
    /// Sizes the send buffers as the receivers ask.
    pub(super) sizer: Sizer,
    /// How many streams take chunks ([`super::grow`]): the first that many of those alive;
    /// the others finish the chunk they hold and idle (and one of them takes over from a
    /// stream that dies).
    pub(super) carrying: AtomicUsize,
    /// The streams that died, one bit each (a transfer has at most 64).
    pub(super) dead: AtomicU64,
}

impl SendShared<'_> {
    /// Whether stream `index` is among those that take chunks.
    fn carries(&self, index: usize) -> bool {
        let below = u64::MAX.checked_shr(64 - index as u32).unwrap_or(0);
        let dead_below = (self.dead.load(Ordering::Relaxed) & below).count_ones() as usize;
        index - dead_below < self.carrying.load(Ordering::Relaxed)
    }
}

/// What a stream did.
#[derive(Debug, Default)]
struct Counts {
    /// Payload bytes confirmed by the receiver (its cumulative count).
    written: u64,
    data_records: u64,
}

/// Runs stream `index` until the whole plan is confirmed, or it fails. On failure its
/// unconfirmed pieces go back to the plan for the other streams.
pub(super) fn stream(
    index: usize,
    params: StreamParams,
    ctx: &SendShared<'_>,
    start: Instant,
) -> ChannelEnd {
    let StreamParams { stream, keys, config } = params;
    let mut taken = Taken::default();
    let mut counts = Counts::default();
    let mut deflater = None;
    let result = (|| {
        if let Some(level) = ctx.compress {
            deflater =
                Some(Deflater::new(level).map_err(|e| ctx.shared.fatal(DataError::File(e)))?);
        }
        let mut conn = Conn::new(stream, keys, start, INPUT_BYTES)?;
        let mut run = Run {
            conn: &mut conn,
            ctx,
            taken: &mut taken,
            counts: &mut counts,
            deflater: deflater.as_mut(),
            idle: Duration::from_micros(config.idle_timeout_us),
            idle_secs: config.idle_secs(),
            buffer_set: None,
            index,
            traced: (start, 0),
        };
        let result = match run.drive() {
            // The peer may have said why before its socket went.
            Err(e @ DataError::Socket(_)) => {
                run.conn.last_word().map_or(Err(e), |r| Err(shutdown_error(r)))
            }
            other => other,
        };
        // The last counters, however short the stream's life.
        run.trace(Instant::now());
        let reason = match &result {
            Ok(()) => REASON_DONE,
            Err(DataError::Cancelled) if !ctx.shared.failed() => REASON_CANCELLED,
            // The peer's own shutdown or a dead socket: nothing to say to it.
            Err(DataError::Socket(_) | DataError::PeerSilent(_)) => return result,
            Err(_) if conn.peer_gone() => return result,
            Err(_) => REASON_BROKEN,
        };
        let closed = conn.close(reason);
        tracing::debug!(stream = index, ?closed, "sending stream closed");
        result
    })();
    if result.is_err() {
        ctx.dead.fetch_or(1u64.checked_shl(index as u32).unwrap_or(0), Ordering::Relaxed);
        ctx.plan.give_back(taken.unacked());
    }
    let report = ChannelReport {
        bytes: counts.written,
        payload_bytes: counts.written,
        seconds: start.elapsed().as_secs_f64(),
        data_pkts: counts.data_records,
        channels: 1,
        ..ChannelReport::default()
    };
    ChannelEnd { report, result }
}

struct Run<'r, 'a> {
    conn: &'r mut Conn,
    ctx: &'r SendShared<'a>,
    taken: &'r mut Taken,
    counts: &'r mut Counts,
    deflater: Option<&'r mut Deflater>,
    idle: Duration,
    idle_secs: u64,
    /// The send buffer set on the socket (`None` while the kernel tunes it).
    buffer_set: Option<u64>,
    index: usize,
    /// When the stream's counters were last traced, and the bytes confirmed then.
    traced: (Instant, u64),
}

impl Run<'_, '_> {
    /// The stream's loop; returns once the plan is confirmed (this stream's part and the
    /// others').
    fn drive(&mut self) -> Result<(), DataError> {
        let mut echo = None;
        let mut pace_until = None;
        loop {
            self.ctx.shared.check()?;
            self.conn.read(usize::MAX)?;
            while let Some((ts, record)) = self.conn.next()? {
                match record {
                    Record::Ack { written, want_buffer } => {
                        self.credit(written);
                        if want_buffer > 0 {
                            let set = &mut self.buffer_set;
                            self.ctx.sizer.apply(self.conn.socket(), want_buffer, set);
                        }
                        echo = Some(ts);
                    }
                    Record::KeepAlive => {}
                    Record::Shutdown { reason } => return Err(shutdown_error(reason)),
                    Record::Data { .. } | Record::Echo { .. } => {
                        return Err(DataError::Stream(
                            "the receiver sent a record only a sender sends".to_owned(),
                        ));
                    }
                }
            }
            if self.conn.closed().is_some() {
                return Err(DataError::Stream(
                    "the receiver closed the stream before the end".to_owned(),
                ));
            }
            let now = Instant::now();
            if now.duration_since(self.conn.heard) >= self.idle {
                return Err(DataError::PeerSilent(self.idle_secs));
            }
            if now.duration_since(self.traced.0) >= TRACE_EVERY {
                self.trace(now);
            }
            let mut queued = 0;
            loop {
                self.conn.flush()?;
                if self.conn.queued() > 0 || queued >= TURN_BYTES {
                    break;
                }
                if let Some(ts) = echo.take() {
                    self.conn.control(Kind::Ack2, &ts.to_be_bytes())?;
                    continue;
                }
                if self.taken.all_acked() && self.ctx.plan.done() {
                    // Every byte is confirmed, by this stream or the others.
                    return Ok(());
                }
                if pace_until.is_some_and(|t| now < t) {
                    break;
                }
                pace_until = None;
                match self.push(now)? {
                    Ok(0) => break,
                    Ok(bytes) => queued += bytes,
                    Err(at) => {
                        pace_until = Some(at);
                        break;
                    }
                }
            }
            if self.conn.queued() == 0
                && now.duration_since(self.conn.spoke) >= keep_alive_every(self.idle)
            {
                self.conn.control(Kind::KeepAlive, &[])?;
                self.conn.flush()?;
            }
            let mut until = now + MAX_SLEEP;
            if let Some(at) = pace_until {
                until = until.min(at);
            }
            if self.conn.queued() > 0 || queued < TURN_BYTES {
                self.conn.wait(until)?;
            }
        }
    }

    /// The stream's state, for `RUST_LOG=sluice=debug` and the server's event log, as the UDP
    /// channels trace theirs: the rate the receiver confirmed since the last trace, and the
    /// kernel's round trip, window and retransmissions.
    fn trace(&mut self, now: Instant) {
        let (at, written) = self.traced;
        let secs = now.duration_since(at).as_secs_f64().max(1e-6);
        let rate_mbit = ((self.counts.written - written) as f64 * 8.0 / secs / 1e6) as u64;
        self.traced = (now, self.counts.written);
        let info = sluice_udp::tcp_rtt(self.conn.socket()).unwrap_or_default();
        tracing::debug!(
            stream = self.index,
            rate_mbit,
            rtt_ms = f64::from(info.rtt_us) / 1000.0,
            cwnd_kib = info.cwnd_bytes >> 10,
            acked_mib = self.counts.written >> 20,
            records = self.counts.data_records,
            retransmitted = info.retransmitted,
            buffer_kib = self.buffer_set.map(|b| b >> 10),
            "sending"
        );
    }

    /// Credits the plan with what the receiver confirmed; forgets the frames done.
    fn credit(&mut self, written: u64) {
        self.counts.written = self.counts.written.max(written);
        let deflater = &mut self.deflater;
        self.taken.credit(written, &self.ctx.plan, &mut |start| {
            if let Some(d) = deflater {
                d.done(start);
            }
        });
    }

    /// Queues the next data record: a piece of the chunk in hand (taking the next chunk from
    /// the plan when none is), compressed when that shrinks it. Returns its bytes (0 when the
    /// plan has nothing for this stream), or when the rate cap lets it go.
    fn push(&mut self, now: Instant) -> Result<Result<usize, Instant>, DataError> {
        let ctx = self.ctx;
        if let Err(at) = ctx.pacer.ready(now) {
            return Ok(Err(at));
        }
        let next = loop {
            if let Some(next) = self.taken.next(COMPRESS_BLOCK_BYTES) {
                break next;
            }
            if !ctx.carries(self.index) {
                return Ok(Ok(0));
            }
            let Some(chunk) = ctx.plan.take() else { return Ok(Ok(0)) };
            self.taken.take(chunk);
        };
        let frame = match self.deflater.as_deref_mut() {
            // A piece handed back partly confirmed is not one the receiver knows: raw.
            Some(deflater) if ctx.plan.whole_piece(&next) => {
                let read = |at: u64, dst: &mut [u8]| read_exact_at(ctx.store, dst, at);
                deflater
                    .piece(next.clone(), read)
                    .map_err(|e| ctx.shared.fatal(DataError::File(e)))?
            }
            _ => None,
        };
        let wire = frame.unwrap_or(next.end - next.start) as usize;
        ctx.pacer.charge(wire as u64, now);
        let (offset, deflater) = match frame {
            Some(_) => (COMPRESSED | next.start, self.deflater.as_deref()),
            None => (next.start, None),
        };
        let store = ctx.store;
        self.conn.queue(Kind::Data, 8 + wire, |body| {
            body[..8].copy_from_slice(&offset.to_be_bytes());
            let filled = match deflater {
                Some(d) => d.fill(offset, &mut body[8..]),
                None => read_exact_at(store, &mut body[8..], offset),
            };
            filled.map_err(|e| ctx.shared.fatal(DataError::File(e)))
        })?;
        // TCP delivers the record or the stream dies, and then the piece goes back to the plan
        // and is compressed again by whichever stream takes it: the frame is not kept.
        if let Some(d) = self.deflater.as_deref_mut() {
            d.done(next.start);
        }
        self.taken.pushed(next, frame);
        self.counts.data_records += 1;
        Ok(Ok(wire))
    }
}
