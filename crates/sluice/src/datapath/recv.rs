//! The receiving end: one thread per channel, all writing into one file and one shared record
//! of what arrived.

use std::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use sluice_proto::pmtu::starting_datagram_bytes;
use sluice_proto::receiver::{Receiver, State};
use sluice_session::arrivals::Arrivals;
use sluice_udp::RecvBatch;

use super::blocks::WriteBehind;
use super::port::{MAX_SLEEP_US, Port};
use super::store::Store;
use super::transfer::{ChannelEnd, Shared};
use super::written::SharedFile;
use super::{ChannelParams, ChannelReport, DataError, Waits, waits};
use sluice_session::compress::{COMPRESSED, Inflater, piece_at};

/// While datagrams kept coming within this long, the receiver takes them in timed turns
/// ([`COALESCE_US`]) instead of sleeping until the next one: a receiver woken for every datagram
/// costs the sending side more than the datagram itself.
const BUSY_POLL_US: u64 = 1_000;
/// Receive batches taken per turn of the loop at most.
const MAX_BATCHES_PER_TURN: usize = 16;
/// While data flows, the receiver sleeps this long between turns, or longer on a slow channel
/// (see [`COALESCE_DATAGRAMS`]).
const COALESCE_US: u64 = 200;
/// A slow channel's turns are long enough for about this many datagrams, up to
/// [`COALESCE_MAX_US`]: at 50 Mbit/s a 200 us turn took one datagram, and the relay topology's
/// channel threads spent most of their time switching. (The kernel stamps each arrival, so
/// the estimators lose nothing; an ACK or NAK waits up to a turn.)
const COALESCE_DATAGRAMS: f64 = 8.0;
/// See [`COALESCE_DATAGRAMS`]: under [`BUSY_POLL_US`], so a flowing channel stays in turns.
const COALESCE_MAX_US: f64 = 800.0;
/// How often a channel logs its state at debug level.
const TRACE_EVERY_US: u64 = 250_000;
/// How long before a receive's start its first datagrams may have reached the socket and still
/// be timed by their kernel receive times: as long as a sender that starts early waits for its
/// receiver's plan.
const QUEUED_BEFORE_START: std::time::Duration = std::time::Duration::from_secs(30);
/// After the last byte arrived, serve this long at least (or 3 RTTs if longer) so that the
/// sender gets its final ACK, unless its shutdown comes first.
const LINGER_MIN_US: u64 = 500_000;

/// What every receiving channel of a transfer shares: the file and what arrived.
pub(super) struct RecvShared<'a> {
    /// The file, with the record of what is on disk (which trails `arrivals` by what the
    /// channels' write-behind buffers hold).
    pub(super) file: SharedFile<'a>,
    pub(super) range: Range<u64>,
    /// The parts of `range` that move (not present before), increasing: where compressed
    /// frames' pieces lie. (The record's, copied to be read without its lock.)
    parts: Vec<Range<u64>>,
    /// What arrived, on any channel: `sluice_session`'s arrival record, the one the simulator
    /// keeps too.
    arrivals: Mutex<Arrivals>,
    /// Bytes arrived (each once), readable without the lock.
    arrived_bytes: AtomicU64,
    /// Bytes that must arrive.
    missing: u64,
    /// Authenticated payloads outside `range` (a peer's bug): dropped.
    out_of_range: AtomicU64,
    pub(super) shared: Shared,
}

impl<'a> RecvShared<'a> {
    /// Receiving `range` of `store`, of which the parts in `present` are there already.
    pub(super) fn new(store: &'a dyn Store, range: Range<u64>, present: &[Range<u64>]) -> Self {
        let arrivals = Arrivals::new(range.clone(), present);
        Self {
            file: SharedFile::new(store, range.clone(), arrivals.held()),
            range,
            parts: arrivals.parts().to_vec(),
            missing: arrivals.missing(),
            arrivals: Mutex::new(arrivals),
            arrived_bytes: AtomicU64::new(0),
            out_of_range: AtomicU64::new(0),
            shared: Shared::default(),
        }
    }

    /// Bytes that must arrive.
    pub(super) fn missing(&self) -> u64 {
        self.missing
    }

    /// Bytes arrived so far.
    pub(super) fn bytes(&self) -> u64 {
        self.arrived_bytes.load(Ordering::Acquire)
    }

    /// Whether every byte of the range arrived (or was present).
    pub(super) fn complete(&self) -> bool {
        self.bytes() == self.missing()
    }

    /// Whether a payload lies inside the range (one outside is a peer's bug: counted, dropped).
    pub(super) fn inside(&self, offset: u64, len: u64) -> bool {
        let inside = Arrivals::within(&self.range, offset, len);
        if !inside {
            self.out_of_range.fetch_add(u64::from(len > 0), Ordering::Relaxed);
        }
        inside
    }

    /// Records a batch's payloads (offset, length) as arrived: one lock per batch, not per
    /// datagram (the channels' threads share it).
    pub(super) fn record(&self, payloads: &[(u64, u64)]) {
        if payloads.is_empty() {
            return;
        }
        let mut arrivals = self.arrivals.lock().unwrap_or_else(|e| e.into_inner());
        let new: u64 = payloads.iter().map(|&(at, len)| arrivals.record(at, len)).sum();
        self.arrived_bytes.fetch_add(new, Ordering::AcqRel);
    }
}

/// Runs channel `index` until the whole range arrived (and its sender shut down or the linger
/// passed), or it fails. What it gathered is written out either way.
pub(super) fn channel(
    index: usize,
    params: ChannelParams,
    ctx: &RecvShared<'_>,
    start: Instant,
) -> ChannelEnd {
    let ChannelParams { config, keys, socket, peer } = params;
    let waits = waits(&config);
    // The size the sender starts with (`sluice_proto::pmtu`).
    let packet_bytes = starting_datagram_bytes(config.packet_size);
    let mut writer = WriteBehind::new(&ctx.file);
    let mut stats = None;
    let mut result = (|| {
        // The clock starts a while before the receive: an early start's first datagrams wait
        // in the socket before its channel runs, and their kernel receive times, earlier than
        // the receive's start, must not all clamp to it (a packet pair timed zero apart).
        let epoch = start.checked_sub(QUEUED_BEFORE_START).unwrap_or(start);
        let port = Port::new(socket, peer, false, epoch)?;
        let mut receiver = Receiver::new(config, keys.seal, keys.open, port.now_us())?;
        let mut inflater = Inflater::new().map_err(|e| ctx.shared.fatal(DataError::File(e)))?;
        let mut sink = Sink { index, writer: &mut writer, inflater: &mut inflater, ctx };
        let result = drive(&mut receiver, &port, &mut sink, waits, packet_bytes);
        stats = Some(receiver.stats().clone());
        result
    })();
    // What arrived is on disk even when the channel failed (a resume can use it).
    if let Err(e) = writer.flush() {
        result = Err(ctx.shared.fatal(DataError::File(e)));
    }
    let report = stats.map(|s| ChannelReport {
        bytes: s.delivered_bytes,
        payload_bytes: s.delivered_bytes,
        seconds: start.elapsed().as_secs_f64(),
        data_pkts: s.data_pkts,
        retransmitted_pkts: 0,
        rejected_pkts: s.rejected_pkts,
        channels: 1,
        lost_channels: 0,
        // Counted over the channels by the verdict.
        carrying: 0,
        ..ChannelReport::default()
    });
    ChannelEnd { report: report.unwrap_or_default(), result }
}

/// Where a channel's payloads go: raw ones to the file at their offsets, those of compressed
/// frames to the inflater until their frame is whole.
pub(super) struct Sink<'s, 'f> {
    /// The channel's index (for its traces).
    pub(super) index: usize,
    pub(super) writer: &'s mut WriteBehind<'f>,
    pub(super) inflater: &'s mut Inflater,
    pub(super) ctx: &'s RecvShared<'f>,
}

impl Sink<'_, '_> {
    /// Takes one delivered payload; pushes what reached the file onto `payloads`.
    pub(super) fn take(
        &mut self,
        offset: u64,
        payload: &[u8],
        payloads: &mut Vec<(u64, u64)>,
    ) -> Result<(), DataError> {
        let ctx = self.ctx;
        if offset & COMPRESSED == 0 {
            let len = payload.len() as u64;
            if ctx.inside(offset, len) {
                self.writer.write(offset, payload).map_err(DataError::File)?;
                payloads.push((offset, len));
            }
            return Ok(());
        }
        let Some(piece) = piece_at(&ctx.parts, offset & !COMPRESSED) else {
            ctx.inside(offset, payload.len() as u64);
            return Ok(());
        };
        let inflated = self.inflater.accept(piece.clone(), offset, payload);
        if let Some(bytes) = inflated.map_err(DataError::Compression)? {
            self.writer.write(piece.start, bytes).map_err(DataError::File)?;
            payloads.push((piece.start, piece.end - piece.start));
        }
        Ok(())
    }
}

/// Runs the receiver's timers due at `now` and sends what it has to say (ACKs, NAKs, ...).
pub(super) fn answer(
    receiver: &mut Receiver,
    port: &Port,
    out: &mut [u8],
    now: u64,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<(), DataError> {
    receiver.handle_timeout(now);
    while let Some(len) = receiver.poll_transmit(now, out) {
        port.send(&out[..len], len, stop)?;
    }
    Ok(())
}

/// The channel loop.
fn drive(
    receiver: &mut Receiver,
    port: &Port,
    sink: &mut Sink<'_, '_>,
    waits: Waits,
    packet_bytes: usize,
) -> Result<(), DataError> {
    let ctx = sink.ctx;
    let mut batch = RecvBatch::new();
    let mut out = vec![0u8; 2048];
    let mut last_datagram_us = None;
    let mut complete_at_us = None;
    let mut next_trace_us = 0;
    // How long before it was taken the kernel received the first data this channel delivered
    // (once known, and once said).
    let mut first_data: (Option<u64>, bool) = (None, false);
    // The payloads of one batch, recorded as arrived together.
    let mut payloads: Vec<(u64, u64)> = Vec::with_capacity(sluice_udp::RECV_BATCH * 64);
    // The datagrams of the last turn and when it began: the turn's length (see `COALESCE_US`).
    let (mut turn_datagrams, mut turn_began_us) = (0usize, port.now_us());
    let mut coalesce_us = COALESCE_US;
    loop {
        if let Err(stopped) = ctx.shared.check() {
            if !ctx.complete() {
                return Err(stopped);
            }
            // Every byte is here: a stop ends the linger, not the channel (an error that
            // stopped the transfer is the verdict's, whatever the channels say). The sender
            // hears this channel's last acknowledgement first, if the socket takes it.
            let now = port.now_us();
            receiver.ack_now(now);
            let _ = answer(receiver, port, &mut out, now, &ctx.shared.stop);
            return Ok(());
        }
        // Drain what is waiting (a bounded number of batches, so timers still run): one batch
        // per wake-up cannot keep up once wake-ups come late.
        for _ in 0..MAX_BATCHES_PER_TURN {
            let count = port.recv(&mut batch)?;
            if count == 0 {
                break;
            }
            let at = port.now_us();
            last_datagram_us = Some(at);
            turn_datagrams += count;
            let mut take_error = None;
            // Each datagram at the time the kernel received it: the estimators measure the
            // intervals between arrivals, which one time for the whole batch would make zero.
            // A payload that arrived before (a chunk handed from a dead channel to another)
            // goes to the writer again; the shared file skips what is already on disk.
            batch.datagrams_timed(|age_us, d| {
                let arrived = at.saturating_sub(age_us.unwrap_or(0));
                if let Ok(Some(delivered)) = receiver.handle_datagram(arrived, d)
                    && take_error.is_none()
                {
                    first_data.0.get_or_insert(age_us.unwrap_or(0));
                    let payload = &d[delivered.range];
                    if let Err(e) = sink.take(delivered.offset, payload, &mut payloads) {
                        take_error = Some(e);
                    }
                }
                // What the tail's erasure code rebuilt goes the same way.
                while let Some(rebuilt) = receiver.poll_recovered() {
                    if take_error.is_none()
                        && let Err(e) = sink.take(rebuilt.offset, &rebuilt.payload, &mut payloads)
                    {
                        take_error = Some(e);
                    }
                }
            });
            ctx.record(&payloads);
            payloads.clear();
            if let (Some(age_us), false) = first_data {
                first_data.1 = true;
                log_first_data(sink.index, age_us);
            }
            if let Some(e) = take_error {
                return Err(ctx.shared.fatal(e));
            }
            if batch.messages() < sluice_udp::RECV_BATCH {
                break;
            }
        }
        let now = port.now_us();
        if complete_at_us.is_none() && ctx.complete() {
            sink.writer.flush().map_err(|e| ctx.shared.fatal(DataError::File(e)))?;
            complete_at_us = Some(now);
            tracing::debug!(
                channel = sink.index,
                duplicates = receiver.stats().duplicate_pkts,
                parity = receiver.stats().parity_pkts,
                rebuilt = receiver.stats().recovered_pkts,
                "every byte is here"
            );
            // The sender's end waits for this: a relay's next deposit takes the link then.
            receiver.ack_now(now);
        }
        answer(receiver, port, &mut out, now, &ctx.shared.stop)?;
        let linger_until = complete_at_us.map(|at| at + (3 * receiver.rtt_us()).max(LINGER_MIN_US));
        match (receiver.state(), linger_until) {
            (State::Open, Some(until)) if now >= until => return Ok(()),
            (State::Open, _) => {}
            // Complete: a shutdown is the sender's "it is all there"; silence after the last
            // byte means it gave up on hearing the final ACK, which changes nothing here.
            (_, Some(_)) => return Ok(()),
            (_, None) if ctx.complete() => return Ok(()),
            (State::Closed(reason), None) => return Err(DataError::ClosedEarly(reason)),
            (State::Broken, None) if receiver.stats().data_pkts == 0 => {
                return Err(DataError::NothingThrough {
                    secs: waits.first_contact_secs,
                    packet_bytes,
                });
            }
            (State::Broken, None) => return Err(DataError::PeerSilent(waits.idle_secs)),
        }
        if now >= next_trace_us {
            trace(sink.index, receiver, &batch, now);
            next_trace_us = now + TRACE_EVERY_US;
        }
        let deadline = receiver.poll_timeout().unwrap_or(now + MAX_SLEEP_US);
        let deadline = linger_until.map_or(deadline, |l| l.min(deadline));
        if last_datagram_us.is_some_and(|t| now < t + BUSY_POLL_US) && now < deadline {
            // Data is flowing: let a batch gather (the kernel stamps each datagram's arrival,
            // so waiting costs the estimators nothing) instead of waking for every datagram.
            let since_us = now.saturating_sub(turn_began_us).max(1) as f64;
            let per_us = turn_datagrams as f64 / since_us;
            coalesce_us = match per_us > 0.0 {
                true => {
                    (COALESCE_DATAGRAMS / per_us).clamp(COALESCE_US as f64, COALESCE_MAX_US) as u64
                }
                false => coalesce_us,
            };
            (turn_datagrams, turn_began_us) = (0, now);
            std::thread::sleep(std::time::Duration::from_micros(coalesce_us));
        } else {
            // Idle: what is gathered goes to disk now, so the hasher following the written
            // prefix does not wait for this channel's next datagram.
            sink.writer.flush().map_err(|e| ctx.shared.fatal(DataError::File(e)))?;
            port.wait(deadline)?;
            (turn_datagrams, turn_began_us) = (0, port.now_us());
        }
    }
}

/// When the channel's first data reached this host (the kernel's receive time, `age_us` before
/// now), on the wall clock, for `RUST_LOG=sluice=debug`: the bench reads it against the
/// client's `connecting` to measure the time to the first data byte.
fn log_first_data(index: usize, age_us: u64) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    let arrived_unix_us = now.map_or(0, |d| d.as_micros() as u64).saturating_sub(age_us);
    tracing::debug!(channel = index, arrived_unix_us, waited_us = age_us, "first data");
}

/// The channel's state, for `RUST_LOG=sluice=debug` (four times a second).
fn trace(index: usize, receiver: &Receiver, batch: &RecvBatch, now_us: u64) {
    let s = receiver.stats();
    tracing::debug!(
        channel = index,
        t_ms = now_us / 1000,
        received_mib = s.delivered_bytes >> 20,
        data_pkts = s.data_pkts,
        duplicates = s.duplicate_pkts,
        detected_lost = s.detected_lost_pkts,
        naks = s.naks_sent,
        kernel_drops = batch.kernel_drops(),
        "receiving"
    );
}

impl RecvShared<'_> {
    /// Payloads dropped for lying outside the range.
    pub(super) fn out_of_range(&self) -> u64 {
        self.out_of_range.load(Ordering::Relaxed)
    }
}
