//! The receiving end of a stream: one thread each, all writing through the one shared file
//! and record of what arrived ([`RecvShared`]), as the UDP channels do.

use std::time::{Duration, Instant};

use sluice_proto::wire::Kind;

use super::super::blocks::WriteBehind;
use super::super::recv::{RecvShared, Sink};
use super::super::transfer::ChannelEnd;
use super::super::{ChannelReport, DataError};
use super::buffers::{Meter, Sizer};
use super::conn::Conn;
use super::record::{REASON_BROKEN, REASON_CANCELLED, REASON_DONE, Record, shutdown_error};
use super::{StreamParams, keep_alive_every};
use sluice_session::compress::Inflater;

/// The receiver confirms what it wrote once this much more arrived on the stream...
const ACK_EVERY_BYTES: u64 = 1 << 20;
/// ...or this long after the first byte it has not confirmed.
const ACK_DELAY: Duration = Duration::from_millis(5);
/// Bytes read per turn of the loop at most, before the ACK and the timers are looked at.
const TURN_BYTES: usize = 8 << 20;
/// Longest sleep: how soon a stream sees the range complete (by the others) or `stop`.
const MAX_SLEEP: Duration = Duration::from_millis(5);
/// Bytes of the stream's read buffer: several whole data records per read.
const INPUT_BYTES: usize = 4 << 20;

/// Runs stream `index` until the whole range arrived and its sender shut the stream down (or
/// the idle timeout passed after the range was complete), or it fails. What it gathered is
/// written out either way.
pub(super) fn stream(
    index: usize,
    params: StreamParams,
    ctx: &RecvShared<'_>,
    sizer: &Sizer,
    start: Instant,
) -> ChannelEnd {
    let StreamParams { stream, keys, config } = params;
    let mut writer = WriteBehind::new(&ctx.file);
    let mut counts = (0u64, 0u64);
    let mut result = (|| {
        let mut inflater = Inflater::new().map_err(|e| ctx.shared.fatal(DataError::File(e)))?;
        let sink = Sink { index, writer: &mut writer, inflater: &mut inflater, ctx };
        let mut conn = Conn::new(stream, keys, start, INPUT_BYTES)?;
        let mut run = Run {
            conn: &mut conn,
            sink,
            sizer,
            meter: Meter::new(config.rtt_hint_us, Instant::now()),
            buffer_set: None,
            idle: Duration::from_micros(config.idle_timeout_us),
            idle_secs: config.idle_secs(),
            right_size: config.right_size,
            written: 0,
            records: 0,
        };
        let result = match run.drive() {
            // The peer may have said why before its socket went.
            Err(e @ DataError::Socket(_)) => {
                run.conn.last_word().map_or(Err(e), |r| Err(shutdown_error(r)))
            }
            other => other,
        };
        counts = (run.written, run.records);
        let reason = match &result {
            Ok(()) => return result,
            Err(DataError::Cancelled) if !ctx.shared.failed() => REASON_CANCELLED,
            Err(DataError::Socket(_) | DataError::PeerSilent(_)) => return result,
            Err(_) if conn.peer_gone() => return result,
            Err(_) => REASON_BROKEN,
        };
        let closed = conn.close(reason);
        tracing::debug!(stream = index, ?closed, "receiving stream closed");
        result
    })();
    // What arrived is on disk even when the stream failed (a resume can use it).
    if let Err(e) = writer.flush() {
        result = Err(ctx.shared.fatal(DataError::File(e)));
    }
    let report = ChannelReport {
        bytes: counts.0,
        payload_bytes: counts.0,
        seconds: start.elapsed().as_secs_f64(),
        data_pkts: counts.1,
        channels: 1,
        ..ChannelReport::default()
    };
    ChannelEnd { report, result }
}

struct Run<'r, 's, 'f> {
    conn: &'r mut Conn,
    sink: Sink<'s, 'f>,
    sizer: &'r Sizer,
    meter: Meter,
    /// The receive buffer set on the socket (`None` while the kernel tunes it).
    buffer_set: Option<u64>,
    idle: Duration,
    idle_secs: u64,
    right_size: bool,
    /// Payload bytes of this stream taken into the file (the sender's credit), and records.
    written: u64,
    records: u64,
}

impl Run<'_, '_, '_> {
    fn drive(&mut self) -> Result<(), DataError> {
        let ctx = self.sink.ctx;
        let mut confirmed = 0;
        let mut unconfirmed_since = None;
        let mut want_buffer = 0;
        let mut complete_at = None;
        let mut shut_down = false;
        let mut payloads = Vec::new();
        // The end of the last read, and the time waited in poll(2) since: the rest is time away
        // from the socket, while arriving bytes queue in the receive buffer.
        let (mut read_at, mut waited) = (Instant::now(), Duration::ZERO);
        loop {
            ctx.shared.check()?;
            let mut turn = 0;
            loop {
                self.meter.away(read_at.elapsed().saturating_sub(waited));
                let got = self.conn.read(TURN_BYTES - turn)?;
                (read_at, waited) = (Instant::now(), Duration::ZERO);
                turn += got;
                while let Some((_, record)) = self.conn.next()? {
                    match record {
                        Record::Data { offset, payload } => {
                            let bytes = self.conn.payload(&payload);
                            self.sink
                                .take(offset, bytes, &mut payloads)
                                .map_err(|e| ctx.shared.fatal(e))?;
                            self.written += bytes.len() as u64;
                            self.records += 1;
                            self.meter.delivered(bytes.len() as u64);
                            unconfirmed_since.get_or_insert_with(Instant::now);
                        }
                        Record::Echo { ts_us } => self.meter.rtt(self.conn.since_ts(ts_us)),
                        Record::KeepAlive => {}
                        Record::Shutdown { reason: REASON_DONE } => shut_down = true,
                        Record::Shutdown { reason } => return Err(shutdown_error(reason)),
                        Record::Ack { .. } => {
                            return Err(DataError::Stream(
                                "the sender sent a record only a receiver sends".to_owned(),
                            ));
                        }
                    }
                }
                ctx.record(&payloads);
                payloads.clear();
                if got == 0 || turn >= TURN_BYTES || shut_down {
                    break;
                }
            }
            let now = Instant::now();
            if complete_at.is_none() && ctx.complete() {
                complete_at = Some(now);
            }
            if self.right_size && self.meter.due(now) {
                // The kernel's receive-side round trip, where it has one (Linux).
                if let Ok(rtt) = sluice_udp::tcp_rtt(self.conn.socket()) {
                    self.meter.kernel_rtt(u64::from(rtt.rcv_rtt_us));
                }
            }
            if let Some(need) = self.meter.tick(now).filter(|_| self.right_size) {
                self.sizer.apply(self.conn.socket(), need, &mut self.buffer_set);
                want_buffer = need;
            }
            let due = self.written - confirmed >= ACK_EVERY_BYTES
                || unconfirmed_since.is_some_and(|t| now.duration_since(t) >= ACK_DELAY)
                || (complete_at.is_some() && self.written > confirmed)
                || (self.conn.queued() == 0
                    && now.duration_since(self.conn.spoke) >= keep_alive_every(self.idle));
            if due {
                // Confirm only what is in the store: the sender forgets what it confirms.
                self.sink.writer.flush().map_err(|e| ctx.shared.fatal(DataError::File(e)))?;
                let mut body = [0u8; 16];
                body[..8].copy_from_slice(&self.written.to_be_bytes());
                body[8..].copy_from_slice(&want_buffer.to_be_bytes());
                self.conn.control(Kind::Ack, &body)?;
                (confirmed, unconfirmed_since) = (self.written, None);
            }
            self.conn.flush()?;
            if let Some(inside) = self.conn.closed() {
                return match (complete_at.is_some(), inside) {
                    (true, _) => Ok(()),
                    (false, true) => Err(DataError::Stream(
                        "the stream ended inside a record: cut short on the way".to_owned(),
                    )),
                    (false, false) => Err(DataError::Stream(
                        "the sender closed the stream before the range was complete".to_owned(),
                    )),
                };
            }
            if shut_down {
                // The sender's last record: it has every confirmation.
                return match complete_at {
                    Some(_) => Ok(()),
                    None => Err(shutdown_error(REASON_DONE)),
                };
            }
            if now.duration_since(self.conn.heard) >= self.idle {
                // Complete, silence changes nothing: the sender had the last confirmation or
                // will hear of it from its own idle timeout.
                return match complete_at {
                    Some(_) => Ok(()),
                    None => Err(DataError::PeerSilent(self.idle_secs)),
                };
            }
            let mut until = now + MAX_SLEEP;
            if let Some(t) = unconfirmed_since {
                until = until.min(t + ACK_DELAY);
            }
            // Between turns, what is gathered goes to disk, so the hasher following the written
            // prefix does not wait for this stream's next record.
            self.sink.writer.flush().map_err(|e| ctx.shared.fatal(DataError::File(e)))?;
            let before = Instant::now();
            self.conn.wait(until)?;
            waited += before.elapsed();
        }
    }
}
