//! The receiving end of a data channel.
//!
//! # Driving a `Receiver`
//! The receiver is a state machine with no I/O and no clock. Its driver:
//! 1. hands every datagram that arrives on the channel's socket to [`Receiver::handle_datagram`]
//!    with the current time; when it returns a [`Delivered`], the payload (decrypted in place in
//!    the caller's buffer) belongs at `offset` in the application's byte space; every payload is
//!    delivered exactly once, in any order;
//!    After either, it takes the packets the tail's erasure code rebuilt
//!    ([`Receiver::poll_recovered`], [`crate::fec`]) and delivers them the same way;
//! 2. calls [`Receiver::handle_timeout`] when the time returned by [`Receiver::poll_timeout`]
//!    has come;
//! 3. after either, calls [`Receiver::poll_transmit`] until it returns `None`, sending each
//!    datagram it writes (ACKs every SYN, NAKs, and so on);
//! 4. watches [`Receiver::state`] for the end of the channel.
//!
//! The receiver does not know how much data will come; the application does, and decides when it
//! has everything. It keeps acknowledging until the sender shuts the channel down.

use std::collections::VecDeque;
use std::ops::Range;

use crate::SYN_US;
use crate::config::ChannelConfig;
use crate::crypto::PacketKey;
use crate::delay::QueueDelay;
use crate::estimate::{ArrivalSpeed, CapacityEstimator, DeliveryRate, RttEstimator};
use crate::fec;
use crate::intervals::IntervalSet;
use crate::reorder::Reorder;
use crate::seq::Seq31;
use crate::timer::earliest;
use crate::timer::{Timer, TimerTable};
use crate::wire::{
    self, Ack, Control, DataPrefix, HEADER_LEN, Header, Kind, ParityPrefix, TAG_LEN,
};

/// ACKs remembered for matching ACK2s (RTT samples); older ACK2s are ignored.
const ACK_HISTORY: usize = 1024;
/// Control packets waiting to be sent; beyond this, immediate NAKs are dropped (the periodic NAK
/// repeats them).
const MAX_PENDING: usize = 256;
/// NAK packets sent per periodic NAK event at most.
const MAX_NAK_PACKETS_PER_EVENT: u32 = 16;
/// NAK packets that repeat the gaps of one ACK interval at most (see `Receiver::renak_from`):
/// hundreds of ranges each, more than 10 % loss at 1 Gbit/s finds in an interval.
const RENAK_PACKETS: u32 = 4;

/// A payload to deliver: it belongs at `offset`; it lies at `range` in the datagram buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// Where the payload belongs in the application's byte space.
    pub offset: u64,
    /// Where the decrypted payload lies in the buffer given to `handle_datagram`.
    pub range: Range<usize>,
}

/// Why a datagram was not accepted. The channel goes on; drivers count these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// Authentication failed (corruption or forgery) or the packet is malformed.
    #[error("packet failed authentication or is malformed")]
    Invalid,
    /// A valid packet that a receiver does not expect (e.g. an ACK).
    #[error("unexpected packet kind for a receiver")]
    Unexpected,
    /// Data beyond the receive window.
    #[error("data beyond the receive window")]
    OutOfWindow,
}

/// Where a channel end stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Moving data.
    Open,
    /// The channel was closed in order, with this reason code: by the peer's shutdown, or (at
    /// a sender) by its own once everything was acknowledged ([`crate::sender::REASON_DONE`]).
    Closed(u32),
    /// Nothing heard from the peer for the idle timeout (or, at a sender, its packet numbers ran
    /// out).
    Broken,
}

/// Receiver counters.
#[derive(Debug, Clone, Default)]
pub struct ReceiverStats {
    /// Data packets accepted (new or repairs).
    pub data_pkts: u64,
    /// Payload bytes delivered.
    pub delivered_bytes: u64,
    /// Data packets that were already received.
    pub duplicate_pkts: u64,
    /// Datagrams rejected (authentication, malformed, unexpected, out of window).
    pub rejected_pkts: u64,
    /// Packets detected missing (gaps in sequence numbers).
    pub detected_lost_pkts: u64,
    /// Parity packets (halves) of the tail's erasure code accepted.
    pub parity_pkts: u64,
    /// Missing packets the code rebuilt (counted in `data_pkts` too).
    pub recovered_pkts: u64,
    /// ACKs sent.
    pub acks_sent: u64,
    /// NAK packets sent.
    pub naks_sent: u64,
}

#[derive(Debug, Clone, Copy)]
enum Pending {
    Ack,
    /// The answer to the sender's keep-alive, so that an idle sender (one waiting for the other
    /// channels of its transfer) hears from us and does not declare the channel broken.
    KeepAlive,
    /// The answer to a path MTU probe ([`crate::pmtu`]): the path carried that size.
    ProbeAck(u32),
    /// An immediate NAK for one newly detected gap.
    NakGap(u64, u64),
    /// The periodic loss-list report, continuing from this sequence number.
    NakList {
        from: u64,
        packets_left: u32,
    },
}

/// The receiving end of a channel. See the module docs for how to drive it.
#[derive(Debug)]
pub struct Receiver {
    config: ChannelConfig,
    /// Seals the control packets we send.
    tx_key: PacketKey,
    /// Opens the packets the sender sends.
    rx_key: PacketKey,
    next_pn: u64,
    /// One past the largest sequence number received.
    rcv_next: u64,
    loss: IntervalSet,
    arrival: ArrivalSpeed,
    delivery: DeliveryRate,
    capacity: CapacityEstimator,
    rtt: RttEstimator,
    queue_delay: QueueDelay,
    timers: TimerTable,
    ack_no: u32,
    ack_history: VecDeque<(u32, u64)>,
    /// The cumulative ACK point last reported, and whether data arrived since.
    last_acked: u64,
    data_since_ack: bool,
    nak_backoff: u32,
    /// The lowest gap found since the last ACK tick. At the tick, and at the tick after it, the
    /// gaps from there on that are still missing are reported once more: a lost NAK otherwise
    /// waits for the periodic report, up to a round trip later, and at the end of a transfer
    /// every such wait adds to its length. (Twice since 2026-12-07: at 3 % loss both ways a
    /// NAK and its one repeat are lost together about once in a thousand gaps, and at the end
    /// of a large transfer that was enough to hold one tail in ten a round trip longer.)
    renak_from: Option<u64>,
    /// The gaps reported again at the last tick, to be reported once more at the next.
    renak_again: Option<u64>,
    /// How long a gap waits before it is reported: the path's reordering (`crate::reorder`).
    reorder: Reorder,
    pending: VecDeque<Pending>,
    /// The tail's erasure code: the payloads kept from the first coded packet on and the
    /// parities collected ([`crate::fec`]); the packets it rebuilt, for the driver.
    tail: Option<fec::Tail>,
    recovered: VecDeque<fec::Recovered>,
    state: State,
    stats: ReceiverStats,
}

impl Receiver {
    /// A receiver whose clocks start at `now_us`. `tx_key` seals what it sends (receiver to
    /// sender), `rx_key` opens what the sender sends. Fails if the configuration is invalid.
    pub fn new(
        config: ChannelConfig,
        tx_key: PacketKey,
        rx_key: PacketKey,
        now_us: u64,
    ) -> Result<Self, crate::config::ConfigError> {
        config.validate()?;
        let mut timers = TimerTable::default();
        timers.set(Timer::Idle, now_us + config.first_contact_wait_us());
        let initial = u64::from(config.initial_dsn);
        let rtt = RttEstimator::new(config.initial_rtt_us);
        Ok(Self {
            tx_key,
            rx_key,
            next_pn: 0,
            rcv_next: initial,
            loss: IntervalSet::new(),
            arrival: ArrivalSpeed::new(),
            delivery: DeliveryRate::new(),
            capacity: CapacityEstimator::new(),
            rtt,
            queue_delay: QueueDelay::default(),
            timers,
            ack_no: 0,
            ack_history: VecDeque::with_capacity(ACK_HISTORY),
            last_acked: initial,
            data_since_ack: false,
            nak_backoff: 1,
            renak_from: None,
            renak_again: None,
            reorder: Reorder::new(),
            pending: VecDeque::new(),
            tail: None,
            recovered: VecDeque::new(),
            state: State::Open,
            stats: ReceiverStats::default(),
            config,
        })
    }

    /// Where the channel stands.
    pub fn state(&self) -> State {
        self.state
    }

    /// Counters.
    pub fn stats(&self) -> &ReceiverStats {
        &self.stats
    }

    /// Packets currently known missing.
    pub fn missing_pkts(&self) -> u64 {
        self.loss.len()
    }

    /// The receiver's RTT estimate (from ACK/ACK2).
    pub fn rtt_us(&self) -> u64 {
        self.rtt.rtt_us()
    }

    /// First sequence number not yet received: everything before it has arrived.
    fn ack_point(&self) -> u64 {
        self.loss.first().unwrap_or(self.rcv_next)
    }

    /// Processes one datagram that arrived at `now_us`. The buffer is decrypted in place.
    pub fn handle_datagram(
        &mut self,
        now_us: u64,
        datagram: &mut [u8],
    ) -> Result<Option<Delivered>, Rejected> {
        let (header, body_len) = match self.rx_key.open(datagram) {
            Ok(v) => v,
            Err(_) => {
                self.stats.rejected_pkts += 1;
                return Err(Rejected::Invalid);
            }
        };
        let body = &datagram[HEADER_LEN..HEADER_LEN + body_len];
        let result = match header.kind {
            Kind::Data => self.on_data(now_us, &header, body),
            Kind::Parity => self.on_parity(now_us, body),
            kind => match Control::parse(kind, body) {
                Ok(control) => self.on_control(now_us, control),
                Err(_) => Err(Rejected::Invalid),
            },
        };
        match result {
            Ok(_) => {
                if self.state == State::Open {
                    self.timers.set(Timer::Idle, now_us + self.config.idle_timeout_us);
                }
            }
            Err(_) => self.stats.rejected_pkts += 1,
        }
        result
    }

    fn on_data(
        &mut self,
        now_us: u64,
        header: &Header,
        body: &[u8],
    ) -> Result<Option<Delivered>, Rejected> {
        let (prefix, payload) = DataPrefix::parse(body).map_err(|_| Rejected::Invalid)?;
        let dsn = prefix.dsn.extend(self.rcv_next);
        let window = u64::from(self.config.recv_window_pkts);
        if dsn >= self.ack_point() + window {
            return Err(Rejected::OutOfWindow);
        }
        self.arrival.on_arrival(now_us);
        self.delivery.on_arrival(now_us);
        if header.flags & wire::flags::TRAIN == wire::flags::TRAIN {
            self.capacity.on_train_middle(now_us);
        } else if header.flags & wire::flags::PAIR_FIRST != 0 {
            self.capacity.on_pair_first(now_us);
        } else if header.flags & wire::flags::PAIR_SECOND != 0 {
            let datagram_bytes = HEADER_LEN + body.len() + TAG_LEN;
            self.capacity.on_pair_second_sized(now_us, datagram_bytes, self.config.packet_size);
        } else {
            self.capacity.on_other_arrival();
        }
        self.queue_delay.on_packet(now_us, header.timestamp_us);
        if self.timers.get(Timer::Ack).is_none() {
            self.timers.set(Timer::Ack, now_us + SYN_US);
        }

        let fresh = if dsn >= self.rcv_next {
            if dsn > self.rcv_next {
                let (lo, hi) = (self.rcv_next, dsn - 1);
                self.stats.detected_lost_pkts += self.loss.insert(lo, hi);
                if self.reorder.on_gap(lo, hi, now_us) {
                    self.report_gap(now_us, lo, hi);
                }
            }
            self.rcv_next = dsn + 1;
            true
        } else {
            let filled = self.loss.remove(dsn);
            if filled && header.flags & wire::flags::RETRANSMIT == 0 {
                self.reorder.on_late(dsn, now_us, self.rtt.rtt_us() / 4);
            }
            filled
        };
        if !fresh {
            // A repeat means the sender has not seen our acknowledgement (e.g. its timeout probe
            // after the final ACK was lost): acknowledge again at the next ACK tick.
            self.stats.duplicate_pkts += 1;
            self.data_since_ack = true;
            return Ok(None);
        }
        self.data_since_ack = true;
        self.nak_backoff = 1;
        self.stats.data_pkts += 1;
        self.stats.delivered_bytes += payload.len() as u64;
        if self.tail.is_none() && header.flags & wire::flags::CODED != 0 {
            // The sender codes from this packet on: keep it and every later one.
            self.tail = fec::Tail::new(&self.config);
        }
        if let Some(tail) = self.tail.as_mut() {
            tail.keep(dsn, prefix.offset, payload);
            // A repair into a coded block may leave one of its parities one packet short.
            let lines = tail.lines_after(dsn);
            if !lines.is_empty() {
                self.recover(now_us, lines);
            }
        }
        let start = HEADER_LEN + wire::DATA_PREFIX_LEN;
        Ok(Some(Delivered { offset: prefix.offset, range: start..start + payload.len() }))
    }

    /// Half a parity of the tail's code: its block's coded packets end at its last, so what
    /// of them has not come is missing; a parity made whole may rebuild one.
    fn on_parity(&mut self, now_us: u64, body: &[u8]) -> Result<Option<Delivered>, Rejected> {
        let (prefix, bytes) = ParityPrefix::parse(body).map_err(|_| Rejected::Invalid)?;
        let from = prefix.from.extend(self.rcv_next);
        let last = from + u64::from(prefix.count) - 1;
        if last >= self.ack_point() + u64::from(self.config.recv_window_pkts) {
            return Err(Rejected::OutOfWindow);
        }
        self.stats.parity_pkts += 1;
        // Without a loss seen, nothing was kept to rebuild from (and nothing is missing).
        let Some(tail) = self.tail.as_mut() else { return Ok(None) };
        let half = fec::Half {
            from,
            count: prefix.count,
            line: prefix.line,
            half: prefix.half,
            bytes: bytes.to_vec(),
        };
        let whole = tail.take_half(half).map_err(|_| Rejected::Invalid)?;
        if last >= self.rcv_next {
            let lo = self.rcv_next;
            self.stats.detected_lost_pkts += self.loss.insert(lo, last);
            self.rcv_next = last + 1;
            self.report_gap(now_us, lo, last);
        }
        if whole {
            self.recover(now_us, vec![(fec::block_of(from), prefix.line)]);
        }
        Ok(None)
    }

    /// Rebuilds what the tail's code can from the parities `lines`, for
    /// [`Receiver::poll_recovered`].
    fn recover(&mut self, now_us: u64, lines: Vec<(u64, fec::Line)>) {
        let Some(tail) = self.tail.as_mut() else { return };
        for packet in tail.peel(lines, &self.loss) {
            if !self.loss.remove(packet.dsn) {
                continue;
            }
            self.stats.data_pkts += 1;
            self.stats.recovered_pkts += 1;
            self.stats.delivered_bytes += packet.payload.len() as u64;
            self.data_since_ack = true;
            self.recovered.push_back(packet);
        }
        if !self.recovered.is_empty() && self.timers.get(Timer::Ack).is_none() {
            self.timers.set(Timer::Ack, now_us + SYN_US);
        }
    }

    /// The next packet the tail's erasure code rebuilt: deliver its payload at its offset, as
    /// a [`Delivered`] one. Every payload is still delivered exactly once.
    pub fn poll_recovered(&mut self) -> Option<fec::Recovered> {
        self.recovered.pop_front()
    }

    fn on_control(
        &mut self,
        now_us: u64,
        control: Control<'_>,
    ) -> Result<Option<Delivered>, Rejected> {
        match control {
            Control::KeepAlive => self.push_pending(Pending::KeepAlive),
            Control::Probe { id, .. } => self.push_pending(Pending::ProbeAck(id)),
            Control::Shutdown { reason } => {
                self.state = State::Closed(reason);
                self.timers = TimerTable::default();
            }
            Control::DropRequest { first, last } => {
                let lo = first.extend(self.rcv_next);
                let hi = lo + u64::try_from(last.distance_from(first)).unwrap_or(0);
                self.loss.remove_range(lo, hi);
            }
            Control::Ack2 { ack_no } => {
                let index = self.ack_history.front().map(|&(first, _)| ack_no.wrapping_sub(first));
                let entry = index.and_then(|i| self.ack_history.get(i as usize));
                if let Some(&(_, sent_us)) = entry.filter(|(n, _)| *n == ack_no) {
                    self.rtt.on_sample(now_us.saturating_sub(sent_us), now_us);
                }
            }
            Control::Ack(_) | Control::Nak(_) | Control::ProbeAck { .. } => {
                return Err(Rejected::Unexpected);
            }
        }
        Ok(None)
    }

    /// Reports the gap `lo..=hi` (what of it is still missing): a NAK now, again at the next
    /// ACK tick, and periodically until it is filled.
    fn report_gap(&mut self, now_us: u64, lo: u64, hi: u64) {
        if self.pending.len() < MAX_PENDING {
            self.pending.push_back(Pending::NakGap(lo, hi));
        }
        self.renak_from = Some(self.renak_from.map_or(lo, |from| from.min(lo)));
        if self.timers.get(Timer::Nak).is_none() {
            self.timers.set(Timer::Nak, now_us + self.nak_interval_us());
        }
    }

    /// Fires the timers due at `now_us`.
    pub fn handle_timeout(&mut self, now_us: u64) {
        if self.state != State::Open {
            return;
        }
        while let Some((lo, hi)) = self.reorder.due(now_us) {
            self.report_gap(now_us, lo, hi);
        }
        if self.timers.is_due(Timer::Idle, now_us) {
            self.state = State::Broken;
            self.timers = TimerTable::default();
            return;
        }
        if self.timers.is_due(Timer::Ack, now_us) {
            let again = std::mem::replace(&mut self.renak_again, self.renak_from.take());
            if let Some(from) = [self.renak_again, again].into_iter().flatten().min() {
                self.push_pending(Pending::NakList { from, packets_left: RENAK_PACKETS });
            }
            if self.data_since_ack || self.ack_point() != self.last_acked {
                self.push_pending(Pending::Ack);
                self.timers.set(Timer::Ack, now_us + SYN_US);
            } else {
                // Idle: the next data packet re-arms the ACK timer.
                self.timers.stop(Timer::Ack);
            }
        }
        if self.timers.is_due(Timer::Nak, now_us) {
            if self.loss.is_empty() {
                self.timers.stop(Timer::Nak);
            } else {
                let from = self.loss.first().unwrap_or(self.rcv_next);
                self.push_pending(Pending::NakList {
                    from,
                    packets_left: MAX_NAK_PACKETS_PER_EVENT,
                });
                // The interval grows while nothing new arrives (UDT's growing NAK interval).
                self.nak_backoff = (self.nak_backoff + 1).min(16);
                self.timers.set(Timer::Nak, now_us + self.nak_interval_us());
            }
        }
    }

    fn push_pending(&mut self, p: Pending) {
        if self.pending.len() < MAX_PENDING {
            self.pending.push_back(p);
        }
    }

    fn nak_interval_us(&self) -> u64 {
        let base = (self.rtt.rtt_us() + 4 * self.rtt.rtt_var_us()).max(2 * SYN_US);
        base * u64::from(self.nak_backoff.div_ceil(2))
    }

    /// Acknowledges at the next [`Receiver::handle_timeout`] instead of at the next ACK tick
    /// (up to [`SYN_US`] away): for the end of the data, which the sender waits to hear of.
    pub fn ack_now(&mut self, now_us: u64) {
        self.timers.set(Timer::Ack, now_us);
    }

    /// The earliest time at which [`Receiver::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<u64> {
        earliest(self.timers.next_deadline(), self.reorder.next_due_us())
    }

    /// Writes the next control packet to send into `buf` (at least `packet_size` bytes) and
    /// returns its length, or `None` when there is nothing to send.
    pub fn poll_transmit(&mut self, now_us: u64, buf: &mut [u8]) -> Option<usize> {
        while let Some(p) = self.pending.pop_front() {
            if let Some(len) = self.emit_pending(now_us, p, buf) {
                return Some(len);
            }
        }
        None
    }

    fn emit_pending(&mut self, now_us: u64, p: Pending, buf: &mut [u8]) -> Option<usize> {
        let limit = buf.len().min(self.config.packet_size);
        let body_cap = limit.checked_sub(HEADER_LEN + TAG_LEN)?;
        let body = &mut buf[HEADER_LEN..HEADER_LEN + body_cap];
        let (kind, body_len) = match p {
            Pending::Ack => {
                let ack = self.make_ack(now_us);
                (Kind::Ack, Control::Ack(ack).emit(body).ok()?)
            }
            Pending::KeepAlive => (Kind::KeepAlive, Control::KeepAlive.emit(body).ok()?),
            Pending::ProbeAck(id) => (Kind::ProbeAck, Control::ProbeAck { id }.emit(body).ok()?),
            Pending::NakGap(lo, hi) => {
                // Only what is still missing.
                let ranges = self.loss_ranges_from(lo).take_while(|&(l, _)| l <= hi);
                let (n, count) =
                    wire::emit_nak(ranges.map(|(l, h)| (l, h.min(hi))).map(seq_pair), body);
                if count == 0 {
                    return None;
                }
                (Kind::Nak, n)
            }
            Pending::NakList { from, packets_left } => {
                let (n, count) = wire::emit_nak(self.loss_ranges_from(from).map(seq_pair), body);
                if count == 0 {
                    return None;
                }
                if packets_left > 1 {
                    let next = self.loss_ranges_from(from).nth(count).map(|(l, _)| l);
                    if let Some(next) = next {
                        self.pending.push_front(Pending::NakList {
                            from: next,
                            packets_left: packets_left - 1,
                        });
                    }
                }
                (Kind::Nak, n)
            }
        };
        if self.next_pn == u64::MAX {
            // Never reuse a packet number under this key (2^64 packets: not in practice).
            return None;
        }
        let header = Header { kind, flags: 0, pn: self.next_pn, timestamp_us: now_us as u32 };
        header.emit(buf).ok()?;
        let len = self.tx_key.seal(&mut buf[..limit], body_len).ok()?;
        self.next_pn += 1;
        match kind {
            Kind::Ack => self.stats.acks_sent += 1,
            Kind::Nak => self.stats.naks_sent += 1,
            _ => {}
        }
        Some(len)
    }

    /// Loss ranges clipped to start at `from` or later.
    fn loss_ranges_from(&self, from: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.loss
            .ranges()
            .filter(move |&(_, hi)| hi >= from)
            .map(move |(lo, hi)| (lo.max(from), hi))
    }

    /// How long a packet train's capacity reading stands for the pairs'
    /// ([`CapacityEstimator`]): two round trips and a SYN, trains coming once per round trip
    /// (at most every 40 ms) while the sender's controller probes for the link.
    fn train_fresh_us(&self) -> u64 {
        2 * self.rtt.rtt_us().max(40_000) + SYN_US
    }

    fn make_ack(&mut self, now_us: u64) -> Ack {
        let ack_point = self.ack_point();
        self.ack_no = self.ack_no.wrapping_add(1);
        if self.ack_history.len() == ACK_HISTORY {
            self.ack_history.pop_front();
        }
        self.ack_history.push_back((self.ack_no, now_us));
        self.last_acked = ack_point;
        self.data_since_ack = false;
        let span = self.rcv_next - ack_point;
        Ack {
            ack_no: self.ack_no,
            ack_dsn: Seq31::from_ext(ack_point),
            rtt_us: clamp_u32(self.rtt.rtt_us()),
            rtt_var_us: clamp_u32(self.rtt.rtt_var_us()),
            avail_window_pkts: clamp_u32(
                u64::from(self.config.recv_window_pkts).saturating_sub(span),
            ),
            recv_rate_pps: self.arrival.pkts_per_sec(),
            capacity_pps: self.capacity.pkts_per_sec(now_us, self.train_fresh_us()),
            queue_delay_us: self.queue_delay.take_us(),
            rcv_next_dsn: Seq31::from_ext(self.rcv_next),
            missing_pkts: clamp_u32(self.loss.len()),
            delivery_rate_pps: self.delivery.pkts_per_sec(),
        }
    }
}

fn seq_pair((lo, hi): (u64, u64)) -> (Seq31, Seq31) {
    (Seq31::from_ext(lo), Seq31::from_ext(hi))
}

fn clamp_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::Algorithm;

    /// A sender of `bytes` (all pushed) and its receiver.
    fn ends(bytes: u64) -> (crate::sender::Sender, Receiver) {
        let key = |b: u8| PacketKey::new(Algorithm::Aes256Gcm, &[b; 32], [b; 12]);
        let config = ChannelConfig::default();
        let mut sender = crate::sender::Sender::new(config.clone(), key(1), key(2), 0).unwrap();
        let receiver = Receiver::new(config, key(2), key(1), 0).unwrap();
        sender.push(0, bytes);
        sender.finish();
        (sender, receiver)
    }

    /// A receiver that got one data packet and owes an acknowledgement, with its next packet
    /// number at `pn`; what it sends within a second.
    fn owed_ack(pn: u64) -> Vec<u64> {
        let (mut sender, mut receiver) = ends(100);
        let mut buf = vec![0u8; 2048];
        let n = sender.poll_transmit(0, &mut buf, &mut |_, out| out.fill(7)).unwrap();
        receiver.handle_datagram(10, &mut buf[..n]).unwrap();
        receiver.next_pn = pn;
        let mut sent = Vec::new();
        for now in (20..1_000_000).step_by(1000) {
            receiver.handle_timeout(now);
            while let Some(n) = receiver.poll_transmit(now, &mut buf) {
                sent.push(Header::parse(&buf[..n]).unwrap().pn);
            }
        }
        sent
    }

    /// A receiver that got a data packet at 10 us, answered at 20, and got the
    /// last at 40: when it answers next, with `ack_now` at 50 us or without.
    fn next_answer_us(ack_now: bool) -> Option<u64> {
        let (mut sender, mut receiver) = ends(3000);
        let mut first = vec![0u8; 2048];
        let n = sender.poll_transmit(0, &mut first, &mut |_, out| out.fill(7)).unwrap();
        let mut buf = vec![0u8; 2048];
        let m = sender.poll_transmit(0, &mut buf, &mut |_, out| out.fill(7)).unwrap();
        receiver.handle_datagram(10, &mut first[..n]).unwrap();
        receiver.handle_timeout(20);
        let mut answer = vec![0u8; 2048];
        assert!(receiver.poll_transmit(20, &mut answer).is_some(), "its first answer");
        while receiver.poll_transmit(20, &mut answer).is_some() {}
        receiver.handle_datagram(40, &mut buf[..m]).unwrap();
        if ack_now {
            receiver.ack_now(50);
        }
        (50..3 * SYN_US).step_by(10).find(|&now| {
            receiver.handle_timeout(now);
            receiver.poll_transmit(now, &mut answer).is_some()
        })
    }

    #[test]
    fn the_end_of_the_data_is_acknowledged_at_once_when_asked() {
        assert_eq!(next_answer_us(false), Some(40 + SYN_US), "the ACK tick after the packet");
        assert_eq!(next_answer_us(true), Some(50));
    }

    /// A gap is reported when found, and again at each of the next two ACK ticks: a NAK and
    /// its repeat both lost (at 3 % loss, about one gap in a thousand) would otherwise wait for
    /// the periodic report, a round trip or more.
    #[test]
    fn a_gap_is_reported_when_found_and_at_the_next_two_ack_ticks() {
        let (mut sender, mut receiver) = ends(10_000);
        let mut packets = Vec::new();
        for _ in 0..3 {
            let mut buf = vec![0u8; 2048];
            let n = sender.poll_transmit(0, &mut buf, &mut |_, out| out.fill(7)).unwrap();
            buf.truncate(n);
            packets.push(buf);
        }
        // The second packet is lost.
        receiver.handle_datagram(10, &mut packets[0]).unwrap();
        receiver.handle_datagram(20, &mut packets[2]).unwrap();
        let mut buf = vec![0u8; 2048];
        let mut naks = Vec::new();
        for now in (20..4 * SYN_US).step_by(10) {
            receiver.handle_timeout(now);
            while let Some(n) = receiver.poll_transmit(now, &mut buf) {
                if Header::parse(&buf[..n]).unwrap().kind == Kind::Nak {
                    naks.push(now);
                }
            }
        }
        println!("NAKs at {naks:?} us");
        assert_eq!(naks.len(), 3, "found, then two ACK ticks: {naks:?}");
        assert!(naks[0] < SYN_US, "the first when found: {naks:?}");
        assert!(naks[1] <= naks[0] + SYN_US && naks[2] <= naks[1] + SYN_US, "{naks:?}");
    }

    #[test]
    fn the_last_packet_number_is_never_used() {
        // The same receiver with numbers to spare acknowledges; at the last number it is silent.
        let sent = owed_ack(u64::MAX - 1);
        assert_eq!(sent, vec![u64::MAX - 1], "one acknowledgement, then silence");
        assert_eq!(owed_ack(u64::MAX), Vec::<u64>::new());
    }
}
