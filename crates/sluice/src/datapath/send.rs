//! The sending end: one thread per channel, fed chunk by chunk from the shared [`Plan`].

use std::sync::Arc;
use std::time::Instant;

use sluice_proto::cc::coupled::CouplingGroup;
use sluice_proto::pmtu::{BASE_PACKET_SIZE, Probe, starting_datagram_bytes};
use sluice_proto::receiver::State;
use sluice_proto::sender::{REASON_DONE, Sender};
use sluice_udp::RecvBatch;

use super::blocks::ReadAhead;
use super::port::{BATCH_BYTES, MAX_SLEEP_US, Port, check_path_mtu};
use super::store::{Store, read_exact_at};
use super::transfer::{ChannelEnd, Shared};
use super::{ChannelParams, ChannelReport, DataError, Waits, waits};
use sluice_session::chunks::{Plan, Taken};
use sluice_session::compress::{COMPRESS_BLOCK_BYTES, COMPRESSED, Deflater};

/// A channel takes another chunk when less than this is queued and unsent, so its pacer never
/// runs dry while chunks remain.
const LOW_WATER_BYTES: u64 = 1 << 20;
/// The sender paces in batches: it waits until this much sending time has accrued (at most
/// one GSO batch, and half the pacer's catch-up allowance, so a late wake-up is made up) and
/// sends it with one system call.
const BATCH_INTERVAL_US: f64 = 250.0;
/// A slow channel's batches are still this many packets, as long as that is at most
/// [`MAX_BATCH_INTERVAL_US`] of sending: at 50 Mbit/s a channel woke for every packet, and in
/// the relay topology (a sender striping over four 100 Mbit/s paths, the relays, the receiver
/// and the link emulator on two cores) its threads spent most of their time switching.
const MIN_BATCH_PKTS: f64 = 8.0;
/// See [`MIN_BATCH_PKTS`]: a batch is a burst at the bottleneck, 8 packets are 0.9 ms of a
/// 100 Mbit/s link.
const MAX_BATCH_INTERVAL_US: f64 = 2_000.0;
/// With compression, pieces compressed per turn of the loop at most (unless the sender has
/// nothing to send): a piece takes about a millisecond, which the pacer then catches up on.
const PIECES_PER_TURN: usize = 2;
/// How often a channel logs its state at debug level.
const TRACE_EVERY_US: u64 = 250_000;

/// What every sending channel of a transfer shares.
pub(super) struct SendShared<'a> {
    pub(super) store: &'a dyn Store,
    pub(super) end: u64,
    pub(super) plan: Plan,
    pub(super) group: Arc<CouplingGroup>,
    pub(super) shared: Shared,
    /// zstd level of per-piece compression, if any.
    pub(super) compress: Option<i32>,
}

/// Runs channel `index` until the whole plan is acknowledged, or it fails. On failure its
/// unacknowledged chunks go back to the plan for the other channels.
pub(super) fn channel(
    index: usize,
    params: ChannelParams,
    ctx: &SendShared<'_>,
    start: Instant,
) -> ChannelEnd {
    let ChannelParams { config, keys, socket, peer } = params;
    let waits = waits(&config);
    let mut taken = Taken::default();
    let mut stats = None;
    let mut deflater = None;
    let result = (|| {
        if let Some(level) = ctx.compress {
            deflater =
                Some(Deflater::new(level).map_err(|e| ctx.shared.fatal(DataError::File(e)))?);
        }
        check_path_mtu(&socket, peer, config.packet_size).map_err(|e| ctx.shared.fatal(e))?;
        let port = Port::new(socket, peer, true, start)?;
        let cc = ctx.group.member(index);
        // The group holds the transfer to its rate floor; each channel's own share of it is
        // then inert (a channel's period is the group's times the active channels).
        let mut config = config;
        config.min_rate_bps /= ctx.group.channels() as u64;
        let segment = config.packet_size;
        let max_burst_pkts = config.max_burst_pkts;
        let mut sender = Sender::with_controller(config, cc, keys.seal, keys.open, port.now_us())?;
        let mut reader = ReadAhead::new(ctx.store, 0, ctx.end);
        let mut run = Run {
            index,
            sender: &mut sender,
            port: &port,
            reader: &mut reader,
            deflater: deflater.as_mut(),
            segment,
            max_burst_pkts,
            peer,
        };
        let result = run.drive(ctx, &mut taken, waits);
        // What the last ACK acknowledged is done, whatever ended the loop.
        taken.credit(sender.stats().acked_bytes, &ctx.plan, &mut |_| {});
        stats = Some((sender.stats().clone(), sender.min_rtt_us()));
        result
    })();
    ctx.group.set_active(index, false);
    if result.is_err() {
        ctx.plan.give_back(taken.unacked());
    }
    let report = stats.map(|(s, min_rtt_us)| ChannelReport {
        min_rtt_us,
        lost_pkts: s.lost_pkts,
        path_rate_bps: None,
        memory_start: None,
        bytes: s.acked_bytes,
        payload_bytes: s.acked_bytes,
        seconds: start.elapsed().as_secs_f64(),
        data_pkts: s.new_pkts,
        retransmitted_pkts: s.retransmitted_pkts,
        rejected_pkts: s.rejected_pkts,
        channels: 1,
        lost_channels: 0,
        // Counted over the channels by the verdict.
        carrying: 0,
        buffer_notice: None,
    });
    ChannelEnd { report: report.unwrap_or_default(), result }
}

struct Run<'r, 'f> {
    index: usize,
    sender: &'r mut Sender,
    port: &'r Port,
    reader: &'r mut ReadAhead<'f>,
    deflater: Option<&'r mut Deflater>,
    segment: usize,
    max_burst_pkts: u32,
    peer: std::net::SocketAddr,
}

impl Run<'_, '_> {
    /// The channel loop; returns once the plan is done and this channel's shutdown is sent.
    fn drive(
        &mut self,
        ctx: &SendShared<'_>,
        taken: &mut Taken,
        waits: Waits,
    ) -> Result<(), DataError> {
        let mut batch = RecvBatch::new();
        // A batch is at most `batch_segments` packets of `segment` bytes, within BATCH_BYTES.
        let mut out = vec![0u8; BATCH_BYTES.max(self.segment)];
        let mut finished = false;
        let mut next_trace_us = 0;
        let mut probe_told = self.sender.path_probe();
        loop {
            ctx.shared.check()?;
            if self.port.recv(&mut batch)? > 0 {
                let now = self.port.now_us();
                batch.datagrams(|d| self.sender.handle_datagram(now, d));
            }
            let now = self.port.now_us();
            self.sender.handle_timeout(now);
            self.credit(ctx, taken);
            if !finished {
                finished = self.refill(ctx, taken)?;
            }
            let coded = self.sender.tail_code();
            self.transmit(&mut out, now, ctx)?;
            if let (None, Some(parity_pkts)) = (coded, self.sender.tail_code()) {
                tracing::debug!(channel = self.index, parity_pkts, "the tail's code");
            }
            let probe = self.sender.path_probe();
            if probe != probe_told {
                probe_told = probe;
                self.tell_probe(probe);
            }
            match self.sender.state() {
                State::Open => {}
                State::Closed(REASON_DONE) if self.sender.all_acked() => {
                    self.credit(ctx, taken);
                    return Ok(());
                }
                State::Closed(reason) => return Err(DataError::ClosedEarly(reason)),
                State::Broken if self.sender.stats().data_feedback_pkts == 0 => {
                    return Err(DataError::NothingThrough {
                        secs: waits.first_contact_secs,
                        packet_bytes: starting_datagram_bytes(self.segment),
                    });
                }
                State::Broken => return Err(DataError::PeerSilent(waits.idle_secs)),
            }
            if now >= next_trace_us {
                self.trace(now);
                next_trace_us = now + TRACE_EVERY_US;
            }
            let deadline = self.sender.poll_timeout().unwrap_or(now + MAX_SLEEP_US);
            // Let a batch's worth of sending time accrue; the pacer catches up on it at once.
            let rate_pps = self.sender.rate_pps();
            let least = MIN_BATCH_PKTS.min(rate_pps * MAX_BATCH_INTERVAL_US / 1e6);
            let batch_pkts = (rate_pps * BATCH_INTERVAL_US / 1e6)
                .max(least)
                .min(self.port.batch_segments(self.segment) as f64)
                .min(f64::from(self.max_burst_pkts / 2))
                .max(1.0);
            let extra = (batch_pkts - 1.0) * 1e6 / rate_pps.max(1.0);
            self.port.wait(deadline + extra as u64)?;
        }
    }

    /// Says once how the path MTU probing ended (`sluice_proto::pmtu`).
    fn tell_probe(&self, probe: Probe) {
        let (channel, peer, full) = (self.index, self.peer, self.segment);
        match probe {
            Probe::Confirmed => tracing::debug!(
                channel,
                %peer,
                packet_bytes = full,
                "the path carries full-size packets"
            ),
            Probe::BlackHole => tracing::warn!(
                channel,
                %peer,
                "no answer to {full}-byte probes: sending {BASE_PACKET_SIZE}-byte packets \
                 (the path drops larger ones without a word: its MTU is below what the kernel \
                 believes, as through a tunnel that drops ICMP; --packet-size sets a size to try)"
            ),
            Probe::Off | Probe::Probing { .. } => {}
        }
    }

    /// The channel's state, for `RUST_LOG=sluice=debug` (four times a second).
    fn trace(&self, now_us: u64) {
        let s = self.sender.stats();
        let (recv_pps, capacity_pps, delivery_pps) = self.sender.peer_rates_pps();
        let mbit = |pps: u32| (f64::from(pps) * self.segment as f64 * 8.0 / 1e6) as u64;
        tracing::debug!(
            channel = self.index,
            t_ms = now_us / 1000,
            rate_mbit = (self.sender.rate_pps() * self.segment as f64 * 8.0 / 1e6) as u64,
            rtt_ms = self.sender.rtt_us() as f64 / 1000.0,
            queue_ms = f64::from(self.sender.queue_delay_us()) / 1000.0,
            arrival_mbit = mbit(recv_pps),
            capacity_mbit = mbit(capacity_pps),
            delivery_mbit = mbit(delivery_pps),
            in_flight = self.sender.in_flight_pkts(),
            unreceived = self.sender.unreceived_pkts(),
            acked_mib = s.acked_bytes >> 20,
            sent = s.new_pkts,
            retransmitted = s.retransmitted_pkts,
            lost = s.lost_pkts,
            timeouts = s.timeouts,
            send_waits = self.port.send_waits.get(),
            pacing_dropped_ms = s.pacing_dropped_us / 1000,
            competing = self.sender.cc().competing(),
            "sending"
        );
    }

    /// Credits the plan with what the sender had acknowledged; forgets the frames done.
    fn credit(&mut self, ctx: &SendShared<'_>, taken: &mut Taken) {
        let deflater = &mut self.deflater;
        taken.credit(self.sender.stats().acked_bytes, &ctx.plan, &mut |start| {
            if let Some(d) = deflater {
                d.done(start);
            }
        });
    }

    /// Keeps the sender fed from the plan: whole chunks, or with compression piece by piece,
    /// each a frame if it shrinks. Returns true once it was told to finish (the whole plan is
    /// acknowledged).
    fn refill(&mut self, ctx: &SendShared<'_>, taken: &mut Taken) -> Result<bool, DataError> {
        let grid = if self.deflater.is_some() { COMPRESS_BLOCK_BYTES } else { u64::MAX };
        let mut compressed = 0;
        while self.sender.unsent_bytes() < LOW_WATER_BYTES {
            let Some(next) = taken.next(grid) else {
                // With no chunk left to take, the sender's repairs end the transfer (a dead
                // channel's chunks may still come back).
                let chunk = ctx.plan.take();
                self.sender.expect_more(chunk.is_some());
                let Some(chunk) = chunk else { break };
                taken.take(chunk);
                continue;
            };
            let frame = match self.deflater.as_deref_mut() {
                // A piece handed back partly acknowledged is not one the receiver knows: raw.
                Some(deflater) if ctx.plan.whole_piece(&next) => {
                    let read = |at: u64, dst: &mut [u8]| read_exact_at(ctx.store, dst, at);
                    compressed += 1;
                    deflater
                        .piece(next.clone(), read)
                        .map_err(|e| ctx.shared.fatal(DataError::File(e)))?
                }
                _ => None,
            };
            match frame {
                Some(wire) => self.sender.push(COMPRESSED | next.start, wire),
                None => {
                    self.reader.expect(next.start);
                    self.sender.push(next.start, next.end - next.start);
                }
            }
            taken.pushed(next, frame);
            if compressed >= PIECES_PER_TURN && self.sender.unsent_bytes() > 0 {
                break;
            }
        }
        // On a lossy path the tail's code begins near the end.
        self.sender.expect_more_bytes(taken.expected_more(&ctx.plan, ctx.group.sharing_channels()));
        ctx.group.set_active(self.index, !taken.all_acked());
        if taken.all_acked() && ctx.plan.done() {
            // Every byte of the transfer is acknowledged (by this channel or the others).
            self.sender.finish();
            return Ok(true);
        }
        Ok(false)
    }

    /// Sends everything due at `now` in batches of equal-sized datagrams. A packet whose
    /// payload could not be read is not sent: the read error ends the transfer.
    fn transmit(
        &mut self,
        out: &mut [u8],
        now: u64,
        ctx: &SendShared<'_>,
    ) -> Result<(), DataError> {
        let max = self.port.batch_segments(self.segment);
        let mut read_error = None;
        let (mut used, mut count, mut seg) = (0usize, 0usize, 0usize);
        loop {
            let room = &mut out[used..used + self.segment];
            let reader = &mut *self.reader;
            let deflater = self.deflater.as_deref();
            let mut fill = |offset: u64, dst: &mut [u8]| {
                let filled = match deflater {
                    Some(d) if offset & COMPRESSED != 0 => d.fill(offset, dst),
                    _ => reader.fill(offset, dst),
                };
                if let Err(e) = filled {
                    dst.fill(0);
                    read_error.get_or_insert(e);
                }
            };
            let polled = self.sender.poll_transmit(now, room, &mut fill);
            if let Some(e) = read_error.take() {
                return Err(ctx.shared.fatal(DataError::File(e)));
            }
            let Some(len) = polled else { break };
            if starts_new_send(count, seg, len) {
                self.port.send(&out[..used], seg, &ctx.shared.stop)?;
                out.copy_within(used..used + len, 0);
                (used, count) = (0, 0);
            }
            if count == 0 {
                seg = len;
            }
            used += len;
            count += 1;
            if count == max {
                self.port.send(&out[..used], seg, &ctx.shared.stop)?;
                (used, count) = (0, 0);
            }
        }
        if count > 0 {
            self.port.send(&out[..used], seg, &ctx.shared.stop)?;
        }
        Ok(())
    }
}

/// Whether a datagram of `len` bytes starts a new send after `count` gathered datagrams of
/// `seg` bytes. A send carries segments of one size; any other size (a control packet amid
/// data, a probe, a short last packet) starts the next send rather than ending this one as
/// its smaller last segment, which put a packet pair behind a path MTU probe into two sends
/// (BENCHMARKS.md, the slow starts of 2026-11-26).
pub(super) fn starts_new_send(count: usize, seg: usize, len: usize) -> bool {
    count > 0 && len != seg
}
