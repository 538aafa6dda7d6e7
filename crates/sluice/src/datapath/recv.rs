//! The receiving end's loop.

use std::fs::File;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use sluice_proto::intervals::IntervalSet;
use sluice_proto::receiver::{Receiver, State};

use super::blocks::WriteBehind;
use super::port::{DATAGRAM_BUF_BYTES, MAX_SLEEP_US, Port};
use super::{ChannelParams, ChannelReport, DataError, Progress, Reporter, idle_secs};

/// Datagrams taken from the socket per turn at most, so timers (ACKs) are not starved.
const MAX_RECV_PER_TURN: usize = 256;
/// While datagrams keep coming, the receiver polls the socket for this long after the last one
/// instead of sleeping: a sleeping receiver must be woken for each datagram, and the wake-up
/// costs the sending side more than the datagram itself.
const BUSY_POLL_US: u64 = 200;
/// After the last byte arrived, serve this long at least (or 3 RTTs if longer) so that the
/// sender gets its final ACK, unless its shutdown comes first.
const LINGER_MIN_US: u64 = 500_000;

/// What the receiving end has taken in.
struct Intake<'f> {
    range: Range<u64>,
    writer: WriteBehind<'f>,
    /// Byte ranges of `range` that arrived.
    arrived: IntervalSet,
    /// Authenticated payloads that lie outside `range` (a peer's bug): dropped.
    out_of_range: u64,
    /// When the last byte of the range arrived.
    complete_at_us: Option<u64>,
}

impl Intake<'_> {
    fn total(&self) -> u64 {
        self.range.end - self.range.start
    }

    fn bytes(&self) -> u64 {
        self.arrived.len()
    }

    fn take(&mut self, offset: u64, payload: &[u8]) -> Result<(), DataError> {
        let len = payload.len() as u64;
        let inside = offset >= self.range.start
            && offset.checked_add(len).is_some_and(|end| end <= self.range.end);
        if !inside || len == 0 {
            self.out_of_range += u64::from(len > 0);
            return Ok(());
        }
        self.writer.write(offset, payload).map_err(DataError::File)?;
        self.arrived.insert(offset, offset + len - 1);
        Ok(())
    }
}

pub(super) fn run(
    params: ChannelParams,
    file: &File,
    range: Range<u64>,
    progress: &mut dyn FnMut(Progress),
    cancel: &AtomicBool,
) -> Result<ChannelReport, DataError> {
    let total = range.end.saturating_sub(range.start);
    let ChannelParams { config, keys, socket, peer } = params;
    let idle_secs = idle_secs(&config);
    let port = Port::new(socket, peer, false)?;
    let mut receiver = Receiver::new(config, keys.seal, keys.open, port.now_us())?;
    let mut intake = Intake {
        range,
        writer: WriteBehind::new(file),
        arrived: IntervalSet::new(),
        out_of_range: 0,
        complete_at_us: None,
    };
    let mut reporter = Reporter::new(total, port.now_us());

    let mut result =
        drive(&mut receiver, &port, &mut intake, &mut reporter, progress, cancel, idle_secs);
    // What arrived is on disk even when the channel failed (a resume can use it).
    if let Err(e) = intake.writer.flush() {
        result = result.and(Err(DataError::File(e)));
    }
    reporter.finish(intake.bytes(), progress);
    let stats = receiver.stats();
    result.map(|()| ChannelReport {
        bytes: intake.bytes(),
        seconds: intake.complete_at_us.unwrap_or_else(|| port.now_us()) as f64 / 1e6,
        data_pkts: stats.data_pkts,
        retransmitted_pkts: 0,
        rejected_pkts: stats.rejected_pkts + intake.out_of_range,
    })
}

/// The channel loop; returns once the range is complete and the sender has shut down (or the
/// linger passed), or on error.
fn drive(
    receiver: &mut Receiver,
    port: &Port,
    intake: &mut Intake<'_>,
    reporter: &mut Reporter,
    progress: &mut dyn FnMut(Progress),
    cancel: &AtomicBool,
    idle_secs: u64,
) -> Result<(), DataError> {
    let mut buf = vec![0u8; DATAGRAM_BUF_BYTES];
    let mut last_datagram_us = None;
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Err(DataError::Cancelled);
        }
        for _ in 0..MAX_RECV_PER_TURN {
            let Some(len) = port.try_recv(&mut buf)? else { break };
            let at = port.now_us();
            last_datagram_us = Some(at);
            if let Ok(Some(d)) = receiver.handle_datagram(at, &mut buf[..len]) {
                intake.take(d.offset, &buf[d.range])?;
            }
        }
        let now = port.now_us();
        if intake.complete_at_us.is_none() && intake.bytes() == intake.total() {
            intake.writer.flush().map_err(DataError::File)?;
            intake.complete_at_us = Some(now);
        }
        receiver.handle_timeout(now);
        while let Some(len) = receiver.poll_transmit(now, &mut buf) {
            port.send(&buf[..len], cancel)?;
        }
        let linger_until =
            intake.complete_at_us.map(|at| at + (3 * receiver.rtt_us()).max(LINGER_MIN_US));
        match (receiver.state(), linger_until) {
            (State::Open, Some(until)) if now >= until => return Ok(()),
            (State::Open, _) => {}
            // Complete: a shutdown is the sender's "I have it all"; silence after the last
            // byte means it gave up on hearing the final ACK, which changes nothing here.
            (_, Some(_)) => return Ok(()),
            (State::Closed(reason), None) => return Err(DataError::ClosedEarly(reason)),
            (State::Broken, None) => return Err(DataError::PeerSilent(idle_secs)),
        }
        reporter.tick(now, intake.bytes(), progress);
        let deadline = receiver.poll_timeout().unwrap_or(now + MAX_SLEEP_US);
        let deadline = linger_until.map_or(deadline, |l| l.min(deadline));
        if last_datagram_us.is_some_and(|t| now < t + BUSY_POLL_US) && now < deadline {
            std::thread::yield_now();
        } else {
            port.wait(deadline)?;
        }
    }
}
