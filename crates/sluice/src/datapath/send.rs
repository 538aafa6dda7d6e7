//! The sending end's loop.

use std::fs::File;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use sluice_proto::receiver::State;
use sluice_proto::sender::{REASON_DONE, Sender};

use super::blocks::ReadAhead;
use super::port::{DATAGRAM_BUF_BYTES, MAX_SLEEP_US, Port};
use super::{ChannelParams, ChannelReport, DataError, Progress, Reporter, idle_secs};

/// Datagrams taken from the socket per turn at most, so sending is never starved. The sender
/// receives only control packets (an ACK per 10 ms, NAKs), so this is rarely reached.
const MAX_RECV_PER_TURN: usize = 64;

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
    let port = Port::new(socket, peer, true)?;
    let mut sender = Sender::new(config, keys.seal, keys.open, port.now_us())?;
    sender.push(range.start, total);
    sender.finish();
    let mut reader = ReadAhead::new(file, range.start, range.end);
    let mut reporter = Reporter::new(total, port.now_us());

    let result = drive(&mut sender, &port, &mut reader, &mut reporter, progress, cancel, idle_secs);
    let stats = sender.stats();
    reporter.finish(stats.acked_bytes, progress);
    result.map(|()| ChannelReport {
        bytes: stats.acked_bytes,
        seconds: port.now_us() as f64 / 1e6,
        data_pkts: stats.new_pkts,
        retransmitted_pkts: stats.retransmitted_pkts,
        rejected_pkts: stats.rejected_pkts,
    })
}

/// The channel loop; returns once every byte is acknowledged and the shutdown sent, or on error.
fn drive(
    sender: &mut Sender,
    port: &Port,
    reader: &mut ReadAhead<'_>,
    reporter: &mut Reporter,
    progress: &mut dyn FnMut(Progress),
    cancel: &AtomicBool,
    idle_secs: u64,
) -> Result<(), DataError> {
    let mut buf = vec![0u8; DATAGRAM_BUF_BYTES];
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Err(DataError::Cancelled);
        }
        for _ in 0..MAX_RECV_PER_TURN {
            let Some(len) = port.try_recv(&mut buf)? else { break };
            sender.handle_datagram(port.now_us(), &mut buf[..len]);
        }
        let now = port.now_us();
        sender.handle_timeout(now);
        transmit(sender, port, reader, &mut buf, now, cancel)?;
        match sender.state() {
            State::Open => {}
            State::Closed(REASON_DONE) if sender.all_acked() => return Ok(()),
            State::Closed(reason) => return Err(DataError::ClosedEarly(reason)),
            State::Broken => return Err(DataError::PeerSilent(idle_secs)),
        }
        reporter.tick(now, sender.stats().acked_bytes, progress);
        port.wait(sender.poll_timeout().unwrap_or(now + MAX_SLEEP_US))?;
    }
}

/// Sends every datagram due at `now`. A packet whose payload could not be read is not sent:
/// the read error ends the channel.
fn transmit(
    sender: &mut Sender,
    port: &Port,
    reader: &mut ReadAhead<'_>,
    buf: &mut [u8],
    now: u64,
    cancel: &AtomicBool,
) -> Result<(), DataError> {
    let mut read_error = None;
    loop {
        let mut fill = |offset: u64, dst: &mut [u8]| {
            if let Err(e) = reader.fill(offset, dst) {
                dst.fill(0);
                read_error.get_or_insert(e);
            }
        };
        let Some(len) = sender.poll_transmit(now, buf, &mut fill) else { return Ok(()) };
        if let Some(e) = read_error.take() {
            return Err(DataError::File(e));
        }
        port.send(&buf[..len], cancel)?;
    }
}
