//! One hop's data: the bytes of a batch of sealed blocks over the session's own data path,
//! between a sender and a relay (a deposit) or a relay and a collector (a collection). The hop
//! is a request of its own on the session with the relay, so its channels have keys of their
//! own from that session's exporter; the blocks inside are sealed end to end as well
//! ([`super::seal`]).
//!
//! Over UDP both ends bind one socket per negotiated channel and say `Ready` with their ports,
//! the receiving end first (so a sending end whose request was refused reads the refusal);
//! over TCP (a session that came over TCP, as through a path that blocks UDP) `Ready` names no
//! ports and the session's client dials the data streams to the server's port, as a copy's
//! do. Then the sending end sends the batch as one range (blocks end to end, in the order the
//! request or `Holding` listed them) and the receiving end writes it into its store.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use sluice_session::relay::{BlockLen, HopMsg};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::datapath::{self, ChannelReport, Store};
use crate::session::SessionError;
use crate::session::channel::{ChannelSetup, DataTask, bind_data_sockets};
use crate::session::channel::{REPLY_TIMEOUT, frame_error};
use crate::session::drive::data::DataPlan;
use crate::session::messages::{read_message, write_message};

/// Bytes in memory, as a store the data channels read or write (a batch of sealed blocks:
/// bounded by the batch size).
#[derive(Debug, Default)]
pub(crate) struct Memory {
    data: RwLock<Vec<u8>>,
}

impl Memory {
    /// `len` zero bytes, to be written.
    pub(crate) fn zeroed(len: usize) -> Memory {
        Memory { data: RwLock::new(vec![0; len]) }
    }

    /// These bytes, to be read.
    pub(crate) fn of(data: Vec<u8>) -> Memory {
        Memory { data: RwLock::new(data) }
    }

    /// Sealed blocks end to end, in their order, to be read (a hop's batch): one copy
    /// (`concat`); collected byte by byte, 16 MiB took tens of milliseconds of the runtime's
    /// thread.
    pub(crate) fn of_blocks(blocks: &[(u64, Vec<u8>)]) -> Memory {
        Memory::of(blocks.iter().map(|(_, b)| b.as_slice()).collect::<Vec<_>>().concat())
    }

    /// The bytes.
    pub(crate) fn into_inner(self) -> Vec<u8> {
        self.data.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

impl Store for Memory {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let data = self.data.read().unwrap_or_else(|e| e.into_inner());
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(data.len());
        let n = buf.len().min(data.len() - start);
        buf[..n].copy_from_slice(&data[start..start + n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        let mut data = self.data.write().unwrap_or_else(|e| e.into_inner());
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let end =
            start.checked_add(buf.len()).filter(|end| *end <= data.len()).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "a write past the end of the batch")
            })?;
        data[start..end].copy_from_slice(buf);
        Ok(buf.len())
    }
}

/// How many round trips of data, at the rate so far, are left when a receiving end hands its
/// link on ([`Link::Held`]): the next hop's request, its `Ready` exchange and its first
/// packets take about that long, so its data begins as this hop's ends. The data's progress
/// is seen every 10 ms within the last 100 ms of it (the datapath's reports), so a hand-over
/// comes up to 10 ms late; one due sooner than that before the end comes at the end, which
/// the receiving end acknowledges at once.
const HANDOFF_RTTS: f64 = 3.0;
/// The same for a sending end ([`Link::Gate`]): the next hop's request and `Ready` exchange are
/// done, so it starts once this one's last round trip of data is on its way.
const GATE_RTTS: f64 = 1.0;

/// Data channels a hop's data moves on over UDP (both ends bind this many, protocol 11): one,
/// not the session's. A hop is one of several at once (a sender's deposits to each relay and
/// the receiver, each with its next deposit ready behind it), and each channel is a thread
/// pacing its own packets: with the session's two a hop, the relay topology's sender ran
/// eight, and on its 2 cores the controllers read the scheduling noise as queue and cut
/// (deposits side by side at 80-82 Mbit/s, without a loss; alone 89.5). Measured there
/// (`examples/relay_topology.rs --rows one`, 1 GiB, 3 relays and the receiver, the two arms
/// in turn, two channels / one): send 25.99 / 24.74 and 25.73 / 24.50 s on time, 25.92 / 24.81
/// with every link releasing every 200 us; total 96.25 / 95.11, 95.98 / 94.51, 96.81 / 95.57.
/// A single hop is then held to what one channel carries: the striping's parallelism is its
/// destinations.
pub(crate) const HOP_CHANNELS: u32 = 1;

/// An end's link, which one hop's data uses at a time: each hop is a flow of its own, and two
/// starting over each other built a queue that made both cut.
pub(crate) enum Link {
    /// Taken before the hop's request (a collector's: its downlink, one collection at a time);
    /// handed on once about [`HANDOFF_RTTS`] round trips of data are left, or at the end.
    Held(OwnedSemaphorePermit),
    /// Taken once the `Ready` exchange is done, before the first byte (a sender's deposits to
    /// one destination: the next one's request overlaps this one's data); handed on once about
    /// [`GATE_RTTS`] round trips of data are left unacknowledged, or at the end.
    Gate(Arc<Semaphore>),
}

/// The rate the last hop this end sent on a session settled at (bits per second of payload),
/// so that the session's next hop starts its channels there (`ChannelConfig::start_rate_bps`,
/// checked by the controller within a round trip as path memory's start is:
/// [`crate::session::path_memory`]) instead of probing up from a few packets. With one
/// deposit's data at a time on a link ([`Link::Gate`]) each deposit was a fresh flow that
/// climbed again: 8 MiB to the receiver 50 ms away every 0.85-0.92 s, 0.67 s of it at the
/// link's rate.
#[derive(Debug, Default)]
pub(crate) struct HopRate(AtomicU64);

impl HopRate {
    /// Where the next hop starts (0: from a few packets, as a first contact).
    fn start(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Keeps what a finished hop's channels settled on, when it lasted long enough to tell.
    fn learn(&self, report: &ChannelReport) {
        let now = std::time::SystemTime::now();
        if let Some(record) = crate::session::path_memory::record_of(report, now) {
            self.0.store(record.rate_bps, Ordering::Relaxed);
        }
    }
}

/// Which way the hop's data goes from this end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// This end sends the batch.
    Send,
    /// This end receives it.
    Receive,
}

/// Reads the peer's next hop message; its `Failed` is the error.
pub(crate) async fn read_hop(
    recv: &mut quinn::RecvStream,
    conn: &quinn::Connection,
    peer: crate::session::Peer,
) -> Result<HopMsg, SessionError> {
    match read_message(recv, REPLY_TIMEOUT).await.map_err(|e| frame_error(e, conn))? {
        HopMsg::Failed { code, message } => Err(SessionError::from_peer(peer, code, message)),
        other => Ok(other),
    }
}

/// Writes a hop message.
pub(crate) async fn write_hop(
    send: &mut quinn::SendStream,
    conn: &quinn::Connection,
    msg: &HopMsg,
) -> Result<(), SessionError> {
    write_message(send, msg).await.map_err(|e| frame_error(e, conn))
}

/// Receives `blocks` (sealed, end to end in this order) across the hop into memory, as
/// [`move_batch`] does, and cuts them apart.
pub(crate) async fn receive_blocks(
    setup: ChannelSetup<'_>,
    send: &mut quinn::SendStream,
    recv: &mut quinn::RecvStream,
    peer: crate::session::Peer,
    blocks: &[BlockLen],
    link: Option<Link>,
) -> Result<Vec<(u64, Vec<u8>)>, SessionError> {
    let total: u64 = blocks.iter().map(|b| b.len).sum();
    let len = usize::try_from(total)
        .map_err(|_| SessionError::Protocol(format!("a batch of {total} bytes")))?;
    let store = Arc::new(Memory::zeroed(len));
    let into = store.clone();
    move_batch(setup, send, recv, peer, Direction::Receive, into, total, link, None).await?;
    let bytes = Arc::try_unwrap(store).map(Memory::into_inner).unwrap_or_default();
    let mut at = 0usize;
    let mut out = Vec::with_capacity(blocks.len());
    for block in blocks {
        let end = at + block.len as usize;
        out.push((block.id, bytes.get(at..end).unwrap_or_default().to_vec()));
        at = end;
    }
    Ok(out)
}

/// Moves `total` bytes of `store` across the hop, this end sending or receiving: the `Ready`
/// exchange, then the data channels. Returns once every byte is acknowledged (sending) or
/// written (receiving). With `link`, the data moves while this end has it ([`Link`]); a
/// sending end with `rate` starts there and keeps what this hop settled on.
#[allow(clippy::too_many_arguments)] // each is a separate input of the one hop
pub(crate) async fn move_batch(
    mut setup: ChannelSetup<'_>,
    send: &mut quinn::SendStream,
    recv: &mut quinn::RecvStream,
    peer: crate::session::Peer,
    direction: Direction,
    store: Arc<dyn Store + Send + Sync>,
    total: u64,
    link: Option<Link>,
    rate: Option<&HopRate>,
) -> Result<(), SessionError> {
    if setup.streams.is_none() {
        setup.negotiated.channels = setup.negotiated.channels.min(HOP_CHANNELS);
    }
    let conn = setup.conn;
    let peer_ip = conn.remote_address().ip().to_canonical();
    // Over UDP one socket per channel, whose ports `Ready` announces; over TCP (the session
    // came over TCP: a path that blocks UDP) the session's client dials the streams to the
    // server's port, and `Ready` announces none.
    let (sockets, ports) = match setup.streams {
        Some(_) => (Vec::new(), Vec::new()),
        None => {
            let local = conn.local_ip().map(|ip| ip.to_canonical());
            let buffer = datapath::SOCKET_BUFFER_BYTES;
            bind_data_sockets(setup.negotiated.channels, local, peer_ip, buffer)?
        }
    };
    // The receiving end speaks first: a sending end that was refused instead reads why.
    let ready = HopMsg::Ready { udp_ports: ports };
    if direction == Direction::Receive {
        write_hop(send, conn, &ready).await?;
    }
    let peer_ports = match read_hop(recv, conn, peer).await? {
        HopMsg::Ready { udp_ports } => udp_ports,
        other => return Err(SessionError::Protocol(format!("expected Ready, got {other:?}"))),
    };
    if direction == Direction::Send {
        write_hop(send, conn, &ready).await?;
    }
    let plan = match setup.streams {
        Some(opener) => DataPlan::Streams(setup.streams(opener)?),
        None => {
            let mut channels = setup.params(sockets, peer_ip, &peer_ports)?;
            let start = rate.map_or(0, HopRate::start);
            if direction == Direction::Send && start > 0 {
                tracing::debug!(
                    rate_mbit = start / 1_000_000,
                    "a hop starts from the session's last"
                );
                for channel in &mut channels {
                    channel.config.start_rate_bps = start;
                }
            }
            DataPlan::Channels(channels)
        }
    };
    let udp_channels = match &plan {
        DataPlan::Channels(channels) => channels.len(),
        DataPlan::Streams(_) | DataPlan::Carried { .. } => 0,
    };
    let (mut held, lead) = match link {
        None => (None, 0.0),
        Some(Link::Held(permit)) => (Some(permit), HANDOFF_RTTS),
        Some(Link::Gate(gate)) => {
            let permit = tokio::select! {
                permit = gate.acquire_owned() => permit.ok(),
                closed = conn.closed() => return Err(crate::session::connection_error(&closed)),
            };
            (permit, GATE_RTTS)
        }
    };
    let (started, rtt) = (std::time::Instant::now(), conn.rtt().as_secs_f64());
    let peer_at = conn.remote_address();
    // Hands the link on once `lead` round trips of data at the rate so far are left.
    let mut hand_on = move |p: datapath::Progress| {
        if held.is_some() {
            let secs = started.elapsed().as_secs_f64().max(1e-3);
            let left = p.total.saturating_sub(p.bytes) as f64;
            if left <= p.bytes as f64 / secs * lead * rtt {
                held = None;
            }
        }
    };
    let mut task = DataTask::spawn(move |cancel| match direction {
        Direction::Send => plan
            .send(&*store, std::slice::from_ref(&(0..total)), None, None, &mut hand_on, cancel)
            .map(Some),
        Direction::Receive => plan
            .receive(&*store, 0..total, &[], vec![total], &mut hand_on, &|_| {}, cancel)
            .map(|_| None),
    });
    let done = tokio::select! {
        done = task.join() => done?,
        closed = conn.closed() => return Err(crate::session::connection_error(&closed)),
    };
    let report = done.map_err(|e| setup.data_error(e))?;
    // The data phase only (after the `Ready` exchange and the wait for the link).
    let secs = started.elapsed().as_secs_f64().max(1e-3);
    let mbit = total as f64 * 8e-6 / secs;
    tracing::debug!(
        ?direction,
        peer = %peer_at,
        bytes = total,
        udp_channels,
        secs,
        mbit,
        "a hop's data moved"
    );
    if let (Some(rate), Some(report)) = (rate, report) {
        rate.learn(&report);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a hop of `seconds` at 50 ms whose controller settled at 90 Mbit/s reports.
    fn report(seconds: f64) -> ChannelReport {
        ChannelReport {
            payload_bytes: (seconds * 80e6 / 8.0) as u64,
            seconds,
            data_pkts: 1000,
            min_rtt_us: Some(50_000),
            path_rate_bps: Some(90_000_000),
            ..ChannelReport::default()
        }
    }

    #[test]
    fn a_hop_starts_where_the_last_long_enough_one_settled() {
        let rate = HopRate::default();
        assert_eq!(rate.start(), 0, "a first hop probes from a few packets");
        rate.learn(&report(0.1));
        assert_eq!(rate.start(), 0, "two round trips teach nothing");
        rate.learn(&report(0.8));
        assert_eq!(rate.start(), 90_000_000);
        rate.learn(&report(0.05));
        assert_eq!(rate.start(), 90_000_000, "a short hop keeps the last rate");
    }
}
