//! The sending end of a data channel.
//!
//! # Driving a `Sender`
//! The sender is a state machine with no I/O and no clock. Its driver:
//! 1. queues byte ranges of the application's data with [`Sender::push`] (the sender cuts them
//!    into packets) and calls [`Sender::finish`] when no more will come (or, when more may still
//!    come but none is expected, says so with [`Sender::expect_more`]);
//! 2. hands every datagram that arrives from the receiver to [`Sender::handle_datagram`];
//! 3. calls [`Sender::handle_timeout`] when the time from [`Sender::poll_timeout`] has come;
//! 4. after any of the above, calls [`Sender::poll_transmit`] until it returns `None`, sending
//!    each datagram it writes. `poll_transmit` asks the driver for payload bytes through a
//!    callback `fill(offset, buf)` at the moment a packet is built, so the sender holds no payload
//!    and a retransmission reads its bytes again from the source;
//! 5. stops when [`Sender::state`] is no longer [`State::Open`]: [`State::Closed`] with
//!    [`REASON_DONE`] means every byte was acknowledged and the shutdown was sent (a shutdown
//!    from the peer closes it with the peer's reason); [`State::Broken`] means the peer was
//!    silent for the idle timeout, or the packet numbers ran out (see below).
//!
//! Pacing: `poll_transmit` returns `None` when the next packet is not due yet;
//! [`Sender::poll_timeout`] then says when it is. Control packets (ACK2, keep-alive, path MTU
//! probes, shutdown) are not paced.
//!
//! Packet size: new data goes in packets of at most [`crate::pmtu::BASE_PACKET_SIZE`] bytes
//! until the receiver has answered a probe of the full `packet_size` ([`crate::pmtu`]).
//!
//! Packet numbers: every datagram the sender emits takes the next number of one 64-bit counter,
//! which is the AEAD nonce; a retransmitted payload keeps its data sequence number and offset but
//! gets a new packet number. The counter cannot wrap in practice (2^64 packets); the sender stops
//! with [`State::Broken`] rather than reuse one.

use std::collections::VecDeque;

use crate::SYN_US;
use crate::cc::{AckSignal, CongestionControl, LossSignal, WindowBasis};
use crate::config::ChannelConfig;
use crate::crypto::PacketKey;
use crate::estimate::{PAIR_PERIOD_PKTS, RttEstimator, UNRESOLVED_PPS};
use crate::intervals::IntervalSet;
use crate::pmtu::{PathProbe, Probe};
use crate::receiver::State;
use crate::seq::Seq31;
use crate::timer::earliest;
use crate::timer::{Timer, TimerTable};
use crate::wire::{self, Control, DataPrefix, HEADER_LEN, Header, Kind, TAG_LEN};

/// ACK2s waiting to be sent at most (they are sent before data, so this never fills in practice).
const MAX_PENDING_ACK2: usize = 64;
/// In the tail (nothing left to send for the first time), every retransmission and the last new
/// packet go out this many times more. Each repair round costs a round trip, and a lost repair
/// is noticed only at the receiver's next periodic NAK: on a 300 ms path with 3 % loss the end of
/// a transfer waited four or five round trips after its last new packet (1.4 s of an 11.5 s
/// transfer, in simulation and through linkem alike). With three copies a repair is lost with
/// probability p^3 (27 in a million at 3 %), so the tail takes one round. The copies cost only
/// link time the tail leaves idle: a share p of the packets in flight, twice.
pub const TAIL_EXTRA_COPIES: usize = 2;

/// How far ahead of the end of its new data a sender on a lossy path begins the tail's code
/// ([`crate::fec`]), in round trips (RTT + SYN, at the rate of the moment), plus a block. The
/// tail sends the parities of the blocks that hold the packets of its last round trip (RTT + 4
/// RTTVar + SYN), and the end is a guess (what the application expects to push,
/// [`Sender::expect_more_bytes`]: a transfer's rest split among its channels), so coding begins
/// a round trip earlier, and a block earlier still (a block's parities code only what was added
/// to them).
const CODE_AHEAD_ROUND_TRIPS: f64 = 2.0;

/// How long a packet train lasts at the bottleneck, at the capacity last reported: long against
/// the bunching of a receive path (a release every 50-1000 us reads a train of this span within
/// a fifth) and short against any queue (4 ms of the link, once per round trip, in startup).
const TRAIN_SPAN_US: u64 = 4_000;
/// The shortest train: 46 KB of full-size packets, about three TCP initial windows.
const TRAIN_MIN_PKTS: u32 = 32;
/// The longest train.
const TRAIN_MAX_PKTS: u32 = 256;
/// Trains at most this often, however short the round trip: at most a tenth of the link.
const TRAIN_MIN_GAP_US: u64 = 40_000;

/// Sender counters.
#[derive(Debug, Clone, Default)]
pub struct SenderStats {
    /// Data packets sent for the first time.
    pub new_pkts: u64,
    /// Data packets sent again to repair a loss.
    pub retransmitted_pkts: u64,
    /// Extra copies sent in the tail (see [`TAIL_EXTRA_COPIES`]).
    pub tail_copy_pkts: u64,
    /// Parity packets (half parities) of the tail's erasure code sent ([`crate::fec`]).
    pub parity_pkts: u64,
    /// Control packets sent (ACK2, keep-alive, path MTU probes, shutdown).
    pub control_pkts: u64,
    /// Bytes of all datagrams sent.
    pub wire_bytes: u64,
    /// Payload bytes acknowledged.
    pub acked_bytes: u64,
    /// Packets reported lost for the first time.
    pub lost_pkts: u64,
    /// NAKs received.
    pub naks: u64,
    /// EXP timeouts.
    pub timeouts: u64,
    /// Datagrams rejected (authentication, malformed, unexpected).
    pub rejected_pkts: u64,
    /// Datagrams accepted from the receiver (ACK, NAK, keep-alive, probe-ack, shutdown).
    pub feedback_pkts: u64,
    /// Of those, the ones that answer data or probes (ACK, NAK, probe-ack, shutdown). None by
    /// the idle timeout means no data-sized datagram got through (keep-alives are small: a path
    /// that drops larger datagrams may still carry them both ways).
    pub data_feedback_pkts: u64,
    /// Sending time the pacer let go, in microseconds: what a late wake-up left behind beyond
    /// the catch-up allowance (`max_burst_pkts` periods).
    pub pacing_dropped_us: u64,
}

/// A packet in flight: where its payload comes from and when it was last sent.
#[derive(Debug, Clone, Copy)]
struct Slot {
    offset: u64,
    len: u32,
    last_sent_us: u64,
    retransmitted: bool,
}

/// The sending end of a channel. See the module docs for how to drive it.
#[derive(Debug)]
pub struct Sender {
    config: ChannelConfig,
    /// Path MTU probing: the size new data packets may have ([`crate::pmtu`]).
    pmtu: PathProbe,
    /// Seals what we send.
    tx_key: PacketKey,
    /// Opens what the receiver sends.
    rx_key: PacketKey,
    next_pn: u64,
    cc: Box<dyn CongestionControl>,
    rtt: RttEstimator,
    /// The receiver's reported RTTs as samples, for the recent minimum (the path's base RTT).
    rtt_floor: RttEstimator,
    /// Byte ranges queued by the application and not yet cut into packets.
    queue: VecDeque<(u64, u64)>,
    queued_bytes: u64,
    finished: bool,
    /// Everything before this sequence number is acknowledged.
    snd_una: u64,
    /// Next new sequence number.
    next_dsn: u64,
    /// Packets `snd_una..next_dsn`.
    flight: VecDeque<Slot>,
    /// Sequence numbers to retransmit.
    loss: IntervalSet,
    /// Extra copies of the tail's repairs and of its newest packet (see [`TAIL_EXTRA_COPIES`]),
    /// sent after the retransmissions and before `tail_copies`.
    repair_copies: VecDeque<u64>,
    /// The last half round trip's new packets, sent once more in the tail on a lossy path, the
    /// last quarter's twice (see [`Sender::copy_last_half_round_trip`]), after the repairs'
    /// copies.
    tail_copies: VecDeque<u64>,
    /// The tail's erasure code ([`crate::fec`]): the parities of what was sent since coding
    /// began ([`Sender::code_due`]), the halves still to send in the tail, and how many there
    /// were ([`Sender::code_the_last_round_trip`]).
    coder: Option<crate::fec::Coder>,
    parity: VecDeque<crate::fec::Half>,
    parity_made: usize,
    /// Whether the application expects to push more ([`Sender::expect_more`]).
    more_expected: bool,
    /// About how many bytes beyond those pushed the application still has for this sender
    /// ([`Sender::expect_more_bytes`]); `u64::MAX` until it says.
    more_bytes: u64,
    /// Whether the tail has begun ([`Sender::begin_tail`]); pushing more ends it.
    tail_begun: bool,
    next_send_us: f64,
    pair_second_due: bool,
    /// Packets of the current packet train still to send, right behind each other.
    train_left: u32,
    /// When the latest train began, and how many packets it had.
    last_train: Option<(u64, u32)>,
    timers: TimerTable,
    last_feedback_us: u64,
    last_sent_us: u64,
    exp_count: u32,
    pending_ack2: VecDeque<u32>,
    pending_keepalive: bool,
    shutdown_sent: bool,
    /// The receiver's last report: one past its highest sequence number, its holes, and how many
    /// more packets past `peer_rcv_next` it accepts.
    peer_rcv_next: u64,
    peer_missing_pkts: u64,
    peer_window_pkts: u64,
    queue_delay_us: u32,
    peer_recv_rate_pps: u32,
    peer_capacity_pps: u32,
    peer_delivery_rate_pps: u32,
    /// Since the previous ACK: data packets sent, first-time losses, and whether the sender was
    /// ever held back by anything but its own speed: no data, the flow window, or a freeze. Only
    /// an interval without any of these measures the real sending period (UDT section 4.4: the
    /// host could not keep up with the period), so only then is it passed to the controller.
    interval_sent: u64,
    interval_lost: u64,
    interval_starved: bool,
    last_ack_us: u64,
    state: State,
    stats: SenderStats,
}

impl Sender {
    /// A sender whose clocks start at `now_us`. `tx_key` seals what it sends, `rx_key` opens
    /// what the receiver sends. Fails if the configuration is invalid.
    pub fn new(
        config: ChannelConfig,
        tx_key: PacketKey,
        rx_key: PacketKey,
        now_us: u64,
    ) -> Result<Self, crate::config::ConfigError> {
        let cc = crate::cc::build(&config);
        Self::with_controller(config, cc, tx_key, rx_key, now_us)
    }

    /// A sender like [`Sender::new`] whose rate and window come from `cc` instead of the
    /// controller `config.cc` names (the channels of one transfer share a rate through
    /// [`crate::cc::coupled::CouplingGroup`] members).
    pub fn with_controller(
        config: ChannelConfig,
        cc: Box<dyn CongestionControl>,
        tx_key: PacketKey,
        rx_key: PacketKey,
        now_us: u64,
    ) -> Result<Self, crate::config::ConfigError> {
        config.validate()?;
        let initial = u64::from(config.initial_dsn);
        let mut timers = TimerTable::default();
        timers.set(Timer::Idle, now_us + config.first_contact_wait_us());
        timers.set(Timer::KeepAlive, now_us + config.keepalive_us);
        Ok(Self {
            pmtu: PathProbe::new(config.packet_size, now_us),
            tx_key,
            rx_key,
            next_pn: 0,
            cc,
            rtt: RttEstimator::new(config.initial_rtt_us),
            rtt_floor: RttEstimator::new(config.initial_rtt_us),
            queue: VecDeque::new(),
            queued_bytes: 0,
            finished: false,
            snd_una: initial,
            next_dsn: initial,
            flight: VecDeque::new(),
            loss: IntervalSet::new(),
            repair_copies: VecDeque::new(),
            tail_copies: VecDeque::new(),
            coder: None,
            parity: VecDeque::new(),
            parity_made: 0,
            more_expected: true,
            more_bytes: u64::MAX,
            tail_begun: false,
            next_send_us: now_us as f64,
            pair_second_due: false,
            train_left: 0,
            last_train: None,
            timers,
            last_feedback_us: now_us,
            last_sent_us: now_us,
            exp_count: 0,
            pending_ack2: VecDeque::new(),
            pending_keepalive: false,
            shutdown_sent: false,
            peer_rcv_next: initial,
            peer_missing_pkts: 0,
            peer_window_pkts: u64::from(config.recv_window_pkts),
            queue_delay_us: 0,
            peer_recv_rate_pps: 0,
            peer_capacity_pps: 0,
            peer_delivery_rate_pps: 0,
            interval_sent: 0,
            interval_lost: 0,
            interval_starved: false,
            last_ack_us: now_us,
            state: State::Open,
            stats: SenderStats::default(),
            config,
        })
    }

    /// Queues `len` bytes at `offset` of the application's byte space for sending.
    pub fn push(&mut self, offset: u64, len: u64) {
        if len > 0 && !self.finished {
            self.queue.push_back((offset, len));
            self.queued_bytes += len;
            self.tail_begun = false;
        }
    }

    /// Declares that nothing more will be pushed: once everything is acknowledged, the sender
    /// shuts the channel down and reports [`State::Closed`] with [`REASON_DONE`].
    pub fn finish(&mut self) {
        self.finished = true;
    }

    /// Tells the sender whether the application expects to push more (it does until told
    /// otherwise, or until [`Sender::finish`]). Once it does not and everything pushed has been
    /// sent, the sender is in its tail: only repairs stand between the receiver and the end, so
    /// each goes out several times (see [`TAIL_EXTRA_COPIES`]). Pushing more is still allowed.
    pub fn expect_more(&mut self, more: bool) {
        self.more_expected = more;
    }

    /// Tells the sender about how many bytes beyond those pushed the application still has for
    /// it (a guess is fine). On a lossy path the tail's code then begins only near the end
    /// ([`CODE_AHEAD_ROUND_TRIPS`]): coding costs every new packet three XORs here and a copy at
    /// the receiver, and only the end's parities are ever sent. Until told, a sender codes from
    /// the first loss the receiver reports on, as the end may come at any time.
    pub fn expect_more_bytes(&mut self, bytes: u64) {
        self.more_bytes = bytes;
    }

    /// Whether the tail's code is due from the next new packet on: the receiver has reported a
    /// loss (the path loses packets), and the end of the new data is within
    /// [`CODE_AHEAD_ROUND_TRIPS`] round trips and a block, or not known.
    fn code_due(&self) -> bool {
        if self.stats.lost_pkts == 0 {
            return false;
        }
        if self.more_bytes == u64::MAX {
            return true;
        }
        let payload = self.config.payload_size().max(1) as f64;
        // The round trip's variation is left out: early on it still holds the distance from
        // the first guess (a path of 300 ms read 100 ms of it), and would start the code seconds
        // ahead.
        let round_trip_us = (self.rtt.rtt_us() + SYN_US) as f64;
        let reach_pkts = self.rate_pps() * round_trip_us * CODE_AHEAD_ROUND_TRIPS / 1e6
            + crate::fec::BLOCK_PKTS as f64;
        let left = self.queued_bytes.saturating_add(self.more_bytes);
        left as f64 <= reach_pkts * payload
    }

    /// Whether nothing is left to send for the first time, nor expected.
    fn in_tail(&self) -> bool {
        self.queue.is_empty() && (self.finished || !self.more_expected)
    }

    /// Begins the tail: the newest packet goes out again (if the last packets were lost, no
    /// later one would show the receiver the gap), and so does every repair still
    /// unacknowledged, however long ago it went: one of them lost would cost a periodic NAK, a
    /// round trip or more. On a lossy path the last round trip's packets get an erasure code,
    /// or where it cannot be made, the last half round trip's packets go again.
    ///
    /// Until 2026-12-06 only the repairs of the last round trip (RTT + 4 RTTVar) went again.
    /// A repair older than that and lost waits for the receiver's periodic NAK, which comes up
    /// to a round trip and more after the repair would have arrived. In `channel_loop` (60 MB
    /// at 400 Mbit/s, 300 ms, seeds 100-139; its test
    /// `a_repair_lost_before_the_tail_does_not_hold_the_end` takes ten of them), every byte
    /// was there, in round trips after the last new packet: at 1 % loss 1.19-1.24
    /// in 15 of 40 transfers (0.61-0.62 in the rest), at 3 % 1.10-1.23 in 39 and 2.12 in one.
    /// With every repair in flight copied: 0.61-0.67 in all 40 at 1 %; at 3 % 0.73-0.80 in 37,
    /// 1.12-1.36 in three (one traced: a packet of the last round trip that the code could not
    /// rebuild, repaired after its NAK). The copies are a share `p` of the packets in flight,
    /// twice: 376-872 a transfer at 1 %, against 366-454.
    fn begin_tail(&mut self, now_us: u64) {
        self.tail_begun = true;
        let repairs = self.flight.iter().zip(self.snd_una..);
        let unacknowledged = repairs.filter(|(slot, _)| slot.retransmitted);
        let newest = self.next_dsn.checked_sub(1).filter(|&dsn| dsn >= self.snd_una);
        for dsn in unacknowledged.map(|(_, dsn)| dsn).chain(newest) {
            self.repair_copies.extend(std::iter::repeat_n(dsn, TAIL_EXTRA_COPIES));
        }
        if !self.code_the_last_round_trip(now_us) {
            self.copy_last_half_round_trip(now_us);
        }
    }

    /// On a path that lost packets, queues the parities of the blocks that hold the packets
    /// sent for the first time in the last round trip ([`crate::fec`]), to go out after the
    /// repairs. A packet sent `x` before the tail and lost is otherwise repaired a round trip
    /// and a half after it was sent; with the code it is rebuilt when its block's parities
    /// arrive, half a round trip and the few milliseconds they take into the tail. The parities
    /// were made as the packets went: nothing is computed here. Returns whether there are any.
    fn code_the_last_round_trip(&mut self, now_us: u64) -> bool {
        self.parity.clear();
        let Some(coder) = self.coder.as_ref() else { return false };
        let window_us = self.rtt.rtt_us() + 4 * self.rtt.rtt_var_us() + SYN_US;
        let since_us = now_us.saturating_sub(window_us);
        let recent = self
            .flight
            .iter()
            .rev()
            .take_while(|slot| slot.retransmitted || slot.last_sent_us >= since_us)
            .count();
        let since = self.next_dsn - recent as u64;
        self.parity.extend(coder.halves(since, self.next_dsn));
        self.parity_made = self.parity.len();
        self.parity_made > 0
    }

    /// Where the tail's code has nothing to offer (the first loss was reported after the last
    /// round trip's packets went, so none of them was coded), on a lossy path the tail sends once
    /// more the packets sent for the first time in the last half round trip, newest first,
    /// after the repairs. A packet sent `x` before the
    /// tail and lost is otherwise repaired a round trip after it was sent (its NAK, then the
    /// repair): the end of the data comes a round trip after its last new packet. Its copy,
    /// sent `x` into the tail, arrives `2x` after it would have, so for every `x` under half a
    /// round trip the copy comes first, and the end comes half a round trip sooner.
    ///
    /// Those of the last quarter round trip go a third time, after all the others, newest first
    /// again: a packet lost twice (at 1 % loss, one in ten thousand: at a gigabit and 300 ms
    /// about one per transfer among the half round trip's packets) waits for its repair, up to
    /// half a round trip past the rest. Its second copy goes `x` after half a round trip into
    /// the tail, before the repair for every `x` under a quarter round trip; so the rest of a
    /// packet lost twice comes at most a quarter round trip late.
    ///
    /// Lossy: at least one loss expected among the half round trip's packets, at the loss rate
    /// seen so far. The copies use link time the tail leaves idle, three quarters of a round
    /// trip of it, once per transfer.
    fn copy_last_half_round_trip(&mut self, now_us: u64) {
        let rtt_us = self.rtt.rtt_us();
        let (half_us, quarter_us) =
            (now_us.saturating_sub(rtt_us / 2), now_us.saturating_sub(rtt_us / 4));
        let mut fresh: Vec<(u64, u64)> = self
            .flight
            .iter()
            .zip(self.snd_una..)
            .filter(|(slot, _)| !slot.retransmitted && slot.last_sent_us >= half_us)
            .map(|(slot, dsn)| (dsn, slot.last_sent_us))
            .collect();
        fresh.reverse();
        let sent = self.stats.new_pkts.max(1);
        // Expected losses among them: lost / sent x their count, at least one.
        if self.stats.lost_pkts * fresh.len() as u64 >= sent {
            self.tail_copies.extend(fresh.iter().map(|&(dsn, _)| dsn));
            let newest = fresh.iter().take_while(|&&(_, at)| at >= quarter_us);
            self.tail_copies.extend(newest.map(|&(dsn, _)| dsn));
        }
    }

    /// The parity packets the tail's erasure code queued when the tail began, if any
    /// ([`crate::fec`]).
    pub fn tail_code(&self) -> Option<usize> {
        (self.parity_made > 0).then_some(self.parity_made)
    }

    /// Where the channel stands. [`State::Closed`] with [`REASON_DONE`] means every byte was
    /// acknowledged.
    pub fn state(&self) -> State {
        self.state
    }

    /// Whether every pushed byte is acknowledged.
    pub fn all_acked(&self) -> bool {
        self.queue.is_empty() && self.snd_una == self.next_dsn
    }

    /// Counters.
    pub fn stats(&self) -> &SenderStats {
        &self.stats
    }

    /// Where the path MTU probing stands ([`crate::pmtu`]).
    pub fn path_probe(&self) -> Probe {
        self.pmtu.state()
    }

    /// The congestion controller (for traces).
    pub fn cc(&self) -> &dyn CongestionControl {
        self.cc.as_ref()
    }

    /// The pacing rate in packets per second, after the configured cap.
    pub fn rate_pps(&self) -> f64 {
        1e6 / self.period_us()
    }

    /// Smoothed RTT as reported by the receiver.
    pub fn rtt_us(&self) -> u64 {
        self.rtt.rtt_us()
    }

    /// The least RTT of the recent samples (the path's propagation delay, as far as the
    /// sender knows), `None` before the first.
    pub fn min_rtt_us(&self) -> Option<u64> {
        self.rtt_floor.min_rtt_us()
    }

    /// The forward queuing delay the receiver last reported.
    pub fn queue_delay_us(&self) -> u32 {
        self.queue_delay_us
    }

    /// The receiver's last reports of its arrival speed, of the link capacity (packet pairs)
    /// and of its delivery rate, in packets per second (0: not measured yet).
    pub fn peer_rates_pps(&self) -> (u32, u32, u32) {
        (self.peer_recv_rate_pps, self.peer_capacity_pps, self.peer_delivery_rate_pps)
    }

    /// Packets sent and not yet acknowledged.
    pub fn in_flight_pkts(&self) -> u64 {
        self.next_dsn - self.snd_una
    }

    /// Bytes pushed and not yet sent for the first time.
    pub fn unsent_bytes(&self) -> u64 {
        self.queued_bytes
    }

    fn period_us(&self) -> f64 {
        let (shortest, longest) = self.config.period_bounds_us();
        self.cc.period_us().max(0.01).max(shortest).min(longest)
    }

    /// Packets the receiver has not got, as of its last ACK (sent beyond its highest, plus holes).
    pub fn unreceived_pkts(&self) -> u64 {
        self.next_dsn.saturating_sub(self.peer_rcv_next) + self.peer_missing_pkts
    }

    /// Whether the flow window, the sender's buffer bound and the receiver's window all allow
    /// one more new packet.
    fn window_allows_new(&self) -> bool {
        self.window_room() > 0
    }

    /// How many new packets the windows (the sender's flight, the receiver's, the
    /// controller's) let go now.
    fn window_room(&self) -> u64 {
        let flight = u64::from(self.config.max_flight_pkts).saturating_sub(self.in_flight_pkts());
        let peer = (self.peer_rcv_next + self.peer_window_pkts).saturating_sub(self.next_dsn);
        let counted = match self.cc.window_basis() {
            WindowBasis::Unacknowledged => self.in_flight_pkts(),
            WindowBasis::Unreceived => self.unreceived_pkts(),
        };
        let cc = (self.cc.window_pkts().max(2.0) as u64).saturating_sub(counted);
        flight.min(peer).min(cc)
    }

    fn exp_interval_us(&self) -> u64 {
        let n = u64::from(self.exp_count.max(1));
        let per = self.rtt.rtt_us() + 4 * self.rtt.rtt_var_us();
        (n * per + SYN_US).max(n * 100_000)
    }

    /// Processes one datagram from the receiver that arrived at `now_us` (decrypted in place).
    pub fn handle_datagram(&mut self, now_us: u64, datagram: &mut [u8]) {
        let Ok((header, body_len)) = self.rx_key.open(datagram) else {
            self.stats.rejected_pkts += 1;
            return;
        };
        let body = &datagram[HEADER_LEN..HEADER_LEN + body_len];
        let Ok(control) = Control::parse(header.kind, body) else {
            self.stats.rejected_pkts += 1;
            return;
        };
        if self.state != State::Open {
            return;
        }
        self.stats.feedback_pkts += 1;
        self.last_feedback_us = now_us;
        self.exp_count = 0;
        self.timers.set(Timer::Idle, now_us + self.config.idle_timeout_us);
        if self.in_flight_pkts() > 0 {
            self.timers.set(Timer::Exp, now_us + self.exp_interval_us());
        }
        if !matches!(control, Control::KeepAlive) {
            self.stats.data_feedback_pkts += 1;
        }
        match control {
            Control::Ack(ack) => self.on_ack(now_us, &ack),
            Control::Nak(ranges) => self.on_nak(now_us, ranges),
            Control::Shutdown { reason } => {
                self.state = State::Closed(reason);
                self.timers = TimerTable::default();
            }
            Control::KeepAlive => {}
            Control::ProbeAck { id } => self.pmtu.on_answer(id),
            Control::Ack2 { .. } | Control::DropRequest { .. } | Control::Probe { .. } => {
                self.stats.rejected_pkts += 1;
            }
        }
    }

    fn on_ack(&mut self, now_us: u64, ack: &wire::Ack) {
        if self.pending_ack2.len() < MAX_PENDING_ACK2 {
            self.pending_ack2.push_back(ack.ack_no);
        }
        self.rtt.set(u64::from(ack.rtt_us), u64::from(ack.rtt_var_us));
        self.rtt_floor.on_sample(u64::from(ack.rtt_us), now_us);
        self.queue_delay_us = ack.queue_delay_us;
        self.peer_recv_rate_pps = ack.recv_rate_pps;
        self.peer_capacity_pps = ack.capacity_pps;
        self.peer_delivery_rate_pps = ack.delivery_rate_pps;
        self.peer_window_pkts = u64::from(ack.avail_window_pkts);
        let rcv_next = ack.rcv_next_dsn.extend(self.snd_una);
        if rcv_next >= self.snd_una && rcv_next <= self.next_dsn {
            self.peer_rcv_next = rcv_next;
            self.peer_missing_pkts = u64::from(ack.missing_pkts);
        }

        let ack_dsn = ack.ack_dsn.extend(self.snd_una);
        let mut acked_pkts = 0;
        if ack_dsn > self.snd_una && ack_dsn <= self.next_dsn {
            acked_pkts = ack_dsn - self.snd_una;
            for slot in self.flight.drain(..acked_pkts as usize) {
                self.stats.acked_bytes += u64::from(slot.len);
            }
            self.snd_una = ack_dsn;
            self.loss.remove_below(ack_dsn);
        }
        if self.in_flight_pkts() == 0 {
            self.timers.stop(Timer::Exp);
        }

        let elapsed_us = now_us.saturating_sub(self.last_ack_us);
        let real_period_us = (!self.interval_starved && self.interval_sent > 0 && elapsed_us > 0)
            .then(|| elapsed_us as f64 / self.interval_sent as f64);
        self.cc.on_ack(&AckSignal {
            now_us,
            acked_pkts,
            rtt_us: self.rtt.rtt_us(),
            rtt_var_us: self.rtt.rtt_var_us(),
            min_rtt_us: self.rtt_floor.min_rtt_us().unwrap_or(self.rtt.rtt_us()),
            recv_rate_pps: ack.recv_rate_pps,
            capacity_pps: ack.capacity_pps,
            delivery_rate_pps: ack.delivery_rate_pps,
            queue_delay_us: ack.queue_delay_us,
            real_period_us,
            sent_pkts: self.interval_sent,
            lost_pkts: self.interval_lost,
            snd_next: self.next_dsn,
        });
        self.last_ack_us = now_us;
        self.interval_sent = 0;
        self.interval_lost = 0;
        self.interval_starved = false;
    }

    fn on_nak(&mut self, now_us: u64, ranges: wire::NakRanges<'_>) {
        self.stats.naks += 1;
        // A packet already retransmitted is sent again only when its repair has had time to
        // arrive and be reported: the receiver repeats its loss list, and most repeats are stale.
        let repair_us = self.rtt.rtt_us() + 4 * self.rtt.rtt_var_us();
        let mut first_time = 0;
        let mut added = 0;
        let mut largest = None;
        for (lo, hi) in ranges {
            let lo_ext = lo.extend(self.snd_una);
            let Ok(span) = u64::try_from(hi.distance_from(lo)) else { continue };
            let start = lo_ext.max(self.snd_una);
            let end = (lo_ext + span).min(self.next_dsn.saturating_sub(1));
            if lo_ext + span < self.snd_una || start > end {
                continue;
            }
            for dsn in start..=end {
                let slot = &mut self.flight[(dsn - self.snd_una) as usize];
                if slot.retransmitted && now_us < slot.last_sent_us + repair_us {
                    continue;
                }
                // A repeated report of a loss not yet repaired counts once.
                let inserted = self.loss.insert(dsn, dsn);
                if inserted > 0 && !slot.retransmitted {
                    first_time += 1;
                }
                added += inserted;
            }
            largest = Some(largest.map_or(end, |l: u64| l.max(end)));
        }
        self.stats.lost_pkts += first_time;
        self.interval_lost += first_time;
        if let (Some(largest_lost), true) = (largest, added > 0) {
            self.cc.on_loss(&LossSignal {
                now_us,
                largest_lost,
                lost_pkts: first_time,
                snd_next: self.next_dsn,
                queue_delay_us: self.queue_delay_us,
            });
        }
    }

    /// Fires the timers due at `now_us`.
    pub fn handle_timeout(&mut self, now_us: u64) {
        if self.state != State::Open {
            return;
        }
        if self.timers.is_due(Timer::Idle, now_us) {
            self.state = State::Broken;
            self.timers = TimerTable::default();
            return;
        }
        if self.timers.is_due(Timer::Exp, now_us) {
            if self.in_flight_pkts() > 0 {
                // No feedback for a long time: probe with the newest unacknowledged packet. If
                // the tail of the data was lost, the receiver sees a gap and NAKs it; if the path
                // is down, the probe repeats with a growing interval.
                self.exp_count = self.exp_count.saturating_add(1);
                self.stats.timeouts += 1;
                self.loss.insert(self.next_dsn - 1, self.next_dsn - 1);
                self.cc.on_timeout(now_us);
                self.timers.set(Timer::Exp, now_us + self.exp_interval_us());
            } else {
                self.timers.stop(Timer::Exp);
            }
        }
        if self.timers.is_due(Timer::KeepAlive, now_us) {
            if now_us >= self.last_sent_us + self.config.keepalive_us {
                self.pending_keepalive = true;
            }
            self.timers
                .set(Timer::KeepAlive, self.last_sent_us.max(now_us) + self.config.keepalive_us);
        }
    }

    /// The earliest time at which the sender has something to do: a timer, or the next paced
    /// packet when one is ready to go.
    pub fn poll_timeout(&self) -> Option<u64> {
        let timers = self.timers.next_deadline();
        if self.state != State::Open {
            return timers;
        }
        let timers = earliest(timers, self.pmtu.deadline_us());
        let data = if self.has_data_to_send() {
            let at = self.next_send_us.max(self.cc.frozen_until_us() as f64);
            Some(at.ceil() as u64)
        } else {
            None
        };
        earliest(timers, data)
    }

    fn has_data_to_send(&self) -> bool {
        !self.loss.is_empty()
            || !self.repair_copies.is_empty()
            || !self.tail_copies.is_empty()
            || !self.parity.is_empty()
            || (!self.tail_begun && self.in_tail() && self.next_dsn > self.snd_una)
            || (!self.queue.is_empty() && self.window_allows_new())
            || (self.finished && self.all_acked() && !self.shutdown_sent)
    }

    /// Writes the next datagram to send at `now_us` into `buf` (at least `packet_size` bytes)
    /// and returns its length, or `None` if nothing is due now. `fill(offset, dst)` must write
    /// the application's bytes at `offset` into `dst` (exactly `dst.len()` bytes).
    pub fn poll_transmit(
        &mut self,
        now_us: u64,
        buf: &mut [u8],
        fill: &mut dyn FnMut(u64, &mut [u8]),
    ) -> Option<usize> {
        if self.state != State::Open {
            return None;
        }
        // A pair's second packet goes right behind its first, before any control packet: a
        // packet between them (a path MTU probe at the transfer's start) split the pair into
        // two sends, and a sending thread preempted between them stretched the pair (632 us
        // instead of 12 through linkem at 1 Gbit/s). At the start that one pair is the whole
        // capacity estimate, and startup ended there, at 3 Mbit/s, in 1 transfer of 4.
        if (self.pair_second_due || self.train_left > 0)
            && let Some(len) = self.poll_data(now_us, buf, fill)
        {
            return Some(len);
        }
        if let Some(ack_no) = self.pending_ack2.pop_front() {
            return self.emit_control(now_us, buf, &Control::Ack2 { ack_no });
        }
        if self.pending_keepalive {
            self.pending_keepalive = false;
            return self.emit_control(now_us, buf, &Control::KeepAlive);
        }
        if let Some(id) = self.pmtu.poll(now_us, self.rtt.rtt_us()) {
            let padding = self.pmtu.full_bytes() - HEADER_LEN - TAG_LEN - wire::field::PROBE_ID.end;
            return self.emit_control(now_us, buf, &Control::Probe { id, padding });
        }
        if self.finished && self.all_acked() {
            let len = self.emit_control(now_us, buf, &Control::Shutdown { reason: REASON_DONE });
            self.shutdown_sent = true;
            self.state = State::Closed(REASON_DONE);
            self.timers = TimerTable::default();
            return len;
        }
        self.poll_data(now_us, buf, fill)
    }

    fn poll_data(
        &mut self,
        now_us: u64,
        buf: &mut [u8],
        fill: &mut dyn FnMut(u64, &mut [u8]),
    ) -> Option<usize> {
        let now = now_us as f64;
        if now_us < self.cc.frozen_until_us() {
            self.interval_starved = true;
            self.train_left = 0;
            return None;
        }
        let in_train = self.train_left > 0;
        if !self.pair_second_due && !in_train && now < self.next_send_us {
            return None;
        }
        if !self.tail_begun && self.in_tail() {
            self.begin_tail(now_us);
        }
        let (dsn, retransmit, copy) = match self.next_retransmission() {
            Some(dsn) => (dsn, true, false),
            None => match self.cut_new_packet(now_us) {
                Some(dsn) => (dsn, false, false),
                None => match self.next_tail_copy() {
                    Some(dsn) => (dsn, true, true),
                    None if !self.parity.is_empty() => return self.poll_parity(now_us, buf),
                    None => {
                        self.interval_starved = true;
                        self.pair_second_due = false;
                        self.train_left = 0;
                        return None;
                    }
                },
            },
        };
        let mut flags = if retransmit { wire::flags::RETRANSMIT } else { 0 };
        if in_train {
            self.train_left -= 1;
            flags |= match self.train_left {
                0 => wire::flags::PAIR_SECOND,
                _ => wire::flags::TRAIN,
            };
        } else if self.pair_second_due {
            flags |= wire::flags::PAIR_SECOND;
            self.pair_second_due = false;
        } else if let Some(pkts) = self.train_due(now_us) {
            flags |= wire::flags::PAIR_FIRST;
            self.train_left = pkts - 1;
            self.last_train = Some((now_us, pkts));
            self.cc.on_train(now_us);
        } else if (self.stats.new_pkts + self.stats.retransmitted_pkts)
            .is_multiple_of(PAIR_PERIOD_PKTS)
        {
            flags |= wire::flags::PAIR_FIRST;
            self.pair_second_due = true;
        }
        if !retransmit && self.coder.is_none() && self.code_due() {
            self.coder = crate::fec::Coder::new(&self.config);
        }
        // The receiver keeps payloads from the first coded packet on.
        let coded = !retransmit && self.coder.is_some();
        if coded {
            flags |= wire::flags::CODED;
        }
        let slot = &mut self.flight[(dsn - self.snd_una) as usize];
        slot.last_sent_us = now_us;
        // A copy is not a repair: a NAK of a packet whose copy is on its way still repairs it
        // (a copy of a repair leaves the slot a repair, as it was).
        slot.retransmitted |= retransmit && !copy;
        let (offset, len) = (slot.offset, slot.len as usize);

        let limit = buf.len().min(self.config.packet_size);
        let body_len = wire::DATA_PREFIX_LEN + len;
        if HEADER_LEN + body_len + TAG_LEN > limit {
            return None;
        }
        let header =
            Header { kind: Kind::Data, flags, pn: self.next_pn, timestamp_us: now_us as u32 };
        header.emit(buf).ok()?;
        DataPrefix { dsn: Seq31::from_ext(dsn), offset }.emit(&mut buf[HEADER_LEN..]).ok()?;
        let payload_at = HEADER_LEN + wire::DATA_PREFIX_LEN;
        fill(offset, &mut buf[payload_at..payload_at + len]);
        if let (true, Some(coder)) = (coded, self.coder.as_mut()) {
            coder.add(dsn, offset, &buf[payload_at..payload_at + len]);
        }
        let total = self.seal(now_us, buf, limit, body_len)?;

        // A train's packets after its first go back to back: they are the probe, a few
        // milliseconds of the link at most once per round trip in startup (see `train_due`),
        // on top of the pacing, except from a remembered rate (see `train_borrows`).
        if in_train && self.train_borrows() {
            self.next_send_us += self.period_us();
        } else if !in_train {
            self.pace(now);
        }
        match (retransmit, copy) {
            (_, true) => self.stats.tail_copy_pkts += 1,
            (true, false) => self.stats.retransmitted_pkts += 1,
            (false, false) => self.stats.new_pkts += 1,
        }
        if retransmit && !copy && self.tail_begun {
            // Send this repair again after the others, ahead of the half round trip's copies
            // (thousands of packets at a fast rate: a lost repair's copies queued behind them
            // came half a round trip late).
            self.repair_copies.extend(std::iter::repeat_n(dsn, TAIL_EXTRA_COPIES));
        }
        self.interval_sent += 1;
        // A driver does not poll a sender whose window is shut, so note here whether this packet
        // left the sender held back (window full, or nothing left to send).
        if self.loss.is_empty() && (self.queue.is_empty() || !self.window_allows_new()) {
            self.interval_starved = true;
        }
        if self.timers.get(Timer::Exp).is_none() {
            self.timers.set(Timer::Exp, now_us + self.exp_interval_us());
        }
        Some(total)
    }

    /// Moves the pacing schedule on by one period after a packet sent at `now`, letting go of
    /// what a late wake-up left beyond the catch-up allowance.
    fn pace(&mut self, now: f64) {
        let period = self.period_us();
        let catch_up = f64::from(self.config.max_burst_pkts);
        let earliest = now - period * catch_up;
        if self.next_send_us < earliest {
            self.stats.pacing_dropped_us += (earliest - self.next_send_us) as u64;
        }
        self.next_send_us = self.next_send_us.max(earliest) + period;
    }

    /// Sends the next half parity of the tail's code, paced as a data packet (no train or
    /// pair measures across it).
    fn poll_parity(&mut self, now_us: u64, buf: &mut [u8]) -> Option<usize> {
        self.pair_second_due = false;
        self.train_left = 0;
        let half = self.parity.pop_front()?;
        let prefix = wire::ParityPrefix {
            from: Seq31::from_ext(half.from),
            count: half.count,
            line: half.line,
            half: half.half,
        };
        let limit = buf.len().min(self.config.packet_size);
        let body_len = wire::field::PARITY_BYTES.start + half.bytes.len();
        if HEADER_LEN + body_len + TAG_LEN > limit {
            self.parity.clear();
            return None;
        }
        let header =
            Header { kind: Kind::Parity, flags: 0, pn: self.next_pn, timestamp_us: now_us as u32 };
        header.emit(buf).ok()?;
        prefix.emit(&mut buf[HEADER_LEN..], half.bytes.len()).ok()?;
        let at = HEADER_LEN + wire::field::PARITY_BYTES.start;
        buf[at..at + half.bytes.len()].copy_from_slice(&half.bytes);
        let total = self.seal(now_us, buf, limit, body_len)?;
        self.pace(now_us as f64);
        self.stats.parity_pkts += 1;
        self.interval_sent += 1;
        if self.timers.get(Timer::Exp).is_none() {
            self.timers.set(Timer::Exp, now_us + self.exp_interval_us());
        }
        Some(total)
    }

    /// The length of the packet train to begin now, if one is due: while the controller
    /// [wants trains](CongestionControl::wants_trains), at most one per round trip and per
    /// [`TRAIN_MIN_GAP_US`]. A train spans [`TRAIN_SPAN_US`] at the capacity the receiver last
    /// reported (so that a receive path's bunching of up to a millisecond is a small part of
    /// it), between [`TRAIN_MIN_PKTS`] and [`TRAIN_MAX_PKTS`]; while the receiver reports no
    /// resolved capacity (every train arrived in one bunch), each train is four times the last.
    fn train_due(&self, now_us: u64) -> Option<u32> {
        if !self.cc.wants_trains() {
            return None;
        }
        let gap_us = self.rtt.rtt_us().max(TRAIN_MIN_GAP_US);
        let last_pkts = match self.last_train {
            Some((at_us, _)) if now_us < at_us + gap_us => return None,
            Some((_, pkts)) => pkts,
            None => 0,
        };
        let capacity = u64::from(self.peer_capacity_pps);
        let borrows = self.train_borrows();
        let pkts = if capacity > 0 && capacity < u64::from(UNRESOLVED_PPS) {
            (capacity * TRAIN_SPAN_US / 1_000_000) as u32
        } else if borrows {
            // No reading yet, from a remembered rate near the link: the span at that rate.
            (self.rate_pps() * TRAIN_SPAN_US as f64 / 1e6) as u32
        } else {
            last_pkts.saturating_mul(4)
        };
        // A train cut short has no last packet and measures nothing: no longer than the
        // windows and the data let it be.
        let payload = self.pmtu.datagram_bytes().saturating_sub(wire::DATA_OVERHEAD).max(1);
        let ready = self.queued_bytes.div_ceil(payload as u64) + self.loss.len();
        let room = self.window_room().min(ready).min(u64::from(TRAIN_MAX_PKTS)) as u32;
        // From a remembered rate, a span of the link shorter than the least train is no train:
        // the pairs time such a slow link.
        let least = if borrows { pkts } else { TRAIN_MIN_PKTS };
        let pkts = pkts.clamp(least.min(TRAIN_MAX_PKTS), TRAIN_MAX_PKTS).min(room);
        (pkts >= TRAIN_MIN_PKTS / 2).then_some(pkts)
    }

    /// Whether a train's packets take their periods from the pacing schedule: from a start at a
    /// remembered rate until the first capacity reading. That rate is near the link already;
    /// trains on top of it, grown fourfold without a reading (32, then 128 packets), queued
    /// 10 ms on a 25 Mbit/s link at 50 ms by the first report and 47 ms after, and the cuts
    /// held an 8 MiB copy at 0.67 of the link. Otherwise (a first contact's startup, far below
    /// the link) a train is a brief probe on top of the rate.
    fn train_borrows(&self) -> bool {
        crate::cc::starts_from_memory(&self.config) && self.peer_capacity_pps == 0
    }

    /// The next sequence number to retransmit, skipping any acknowledged meanwhile.
    fn next_retransmission(&mut self) -> Option<u64> {
        while let Some(dsn) = self.loss.pop_first() {
            if dsn >= self.snd_una && dsn < self.next_dsn {
                return Some(dsn);
            }
        }
        None
    }

    /// The next tail copy to send, the repairs' first, skipping any acknowledged meanwhile.
    fn next_tail_copy(&mut self) -> Option<u64> {
        while let Some(dsn) =
            self.repair_copies.pop_front().or_else(|| self.tail_copies.pop_front())
        {
            if dsn >= self.snd_una && dsn < self.next_dsn {
                return Some(dsn);
            }
        }
        None
    }

    /// Cuts the next packet from the queue if the window allows; returns its sequence number.
    fn cut_new_packet(&mut self, now_us: u64) -> Option<u64> {
        if !self.window_allows_new() {
            return None;
        }
        let (offset, len) = self.queue.front_mut()?;
        // Config validation keeps every packet size above the overhead.
        let payload = self.pmtu.datagram_bytes().saturating_sub(wire::DATA_OVERHEAD) as u64;
        let take = (*len).min(payload);
        let slot =
            Slot { offset: *offset, len: take as u32, last_sent_us: now_us, retransmitted: false };
        *offset += take;
        *len -= take;
        if *len == 0 {
            self.queue.pop_front();
        }
        self.queued_bytes -= take;
        self.flight.push_back(slot);
        let dsn = self.next_dsn;
        self.next_dsn += 1;
        Some(dsn)
    }

    fn emit_control(
        &mut self,
        now_us: u64,
        buf: &mut [u8],
        control: &Control<'_>,
    ) -> Option<usize> {
        let limit = buf.len().min(self.config.packet_size);
        let body_cap = limit.checked_sub(HEADER_LEN + TAG_LEN)?;
        let body_len = control.emit(&mut buf[HEADER_LEN..HEADER_LEN + body_cap]).ok()?;
        let header = Header {
            kind: control.kind(),
            flags: 0,
            pn: self.next_pn,
            timestamp_us: now_us as u32,
        };
        header.emit(buf).ok()?;
        let total = self.seal(now_us, buf, limit, body_len)?;
        self.stats.control_pkts += 1;
        Some(total)
    }

    /// Seals the packet whose header is in `buf` and counts it; advances the packet number.
    fn seal(
        &mut self,
        now_us: u64,
        buf: &mut [u8],
        limit: usize,
        body_len: usize,
    ) -> Option<usize> {
        if self.next_pn == u64::MAX {
            self.state = State::Broken;
            return None;
        }
        let total = self.tx_key.seal(&mut buf[..limit], body_len).ok()?;
        self.next_pn += 1;
        self.stats.wire_bytes += total as u64;
        self.last_sent_us = now_us;
        Some(total)
    }
}

/// Shutdown reason: every byte was delivered and acknowledged.
pub const REASON_DONE: u32 = 0;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::CcKind;
    use crate::crypto::Algorithm;

    #[test]
    fn the_last_packet_number_is_never_used_the_sender_breaks_instead() {
        let key = |b: u8| PacketKey::new(Algorithm::Aes256Gcm, &[b; 32], [b; 12]);
        let mut sender = Sender::new(ChannelConfig::default(), key(1), key(2), 0).unwrap();
        sender.push(0, 1 << 20);
        let mut buf = vec![0u8; 2048];
        let mut fill = |_: u64, out: &mut [u8]| out.fill(7);
        let first = sender.poll_transmit(0, &mut buf, &mut fill);
        assert!(first.is_some(), "an open sender sends");
        sender.next_pn = u64::MAX - 1;
        assert!(sender.poll_transmit(1, &mut buf, &mut fill).is_some(), "u64::MAX - 1 is used");
        assert_eq!(Header::parse(&buf).unwrap().pn, u64::MAX - 1);
        // Whenever the pacer next allows a packet, there is none: the sender breaks.
        for now in (2..2_000_000).step_by(1000) {
            assert_eq!(sender.poll_transmit(now, &mut buf, &mut fill), None, "at {now} us");
            if sender.state() == State::Broken {
                return;
            }
        }
        panic!("the sender neither sent nor broke: {:?}", sender.state());
    }

    /// What the start sends at once with `cc`: the kinds and flags of the packets.
    fn start(cc: CcKind) -> Vec<(Kind, u8)> {
        start_with(ChannelConfig { cc, ..ChannelConfig::default() })
    }

    /// What the start sends at once with `config`.
    fn start_with(config: ChannelConfig) -> Vec<(Kind, u8)> {
        let key = |b: u8| PacketKey::new(Algorithm::Aes256Gcm, &[b; 32], [b; 12]);
        let mut sender = Sender::new(config, key(1), key(2), 0).unwrap();
        sender.push(0, 1 << 20);
        assert!(matches!(sender.path_probe(), Probe::Probing { .. }), "{:?}", sender.path_probe());
        let mut buf = vec![0u8; 2048];
        let mut fill = |_: u64, out: &mut [u8]| out.fill(7);
        let mut sent = Vec::new();
        while let Some(len) = sender.poll_transmit(0, &mut buf, &mut fill) {
            let header = Header::parse(&buf[..len]).unwrap();
            sent.push((header.kind, header.flags));
            assert!(sent.len() <= 2 + TRAIN_MAX_PKTS as usize, "{sent:?}");
        }
        assert!(sent.iter().any(|(k, _)| *k != Kind::Data), "no probe went out: {sent:?}");
        sent
    }

    #[test]
    fn at_the_start_a_pairs_two_packets_follow_the_probe_back_to_back() {
        // A path MTU probe, then the first data packet (a pair's first) and its second. (This
        // order held before the pair was sent ahead of control packets too; the datapath's
        // batching split the pair, see `datapath::send::starts_new_send`.)
        let sent = start(CcKind::Udt);
        let first = sent.iter().position(|(_, f)| f & wire::flags::PAIR_FIRST != 0).unwrap();
        let (kind, flags) = sent[first + 1];
        assert!(kind == Kind::Data && flags == wire::flags::PAIR_SECOND, "{sent:?}");
    }

    #[test]
    fn in_startup_a_trains_packets_follow_each_other_back_to_back() {
        // `adaptive` in startup wants trains: a pair's first, middles, a pair's second, with
        // nothing between them, as long as the windows let go at once.
        let sent = start(CcKind::Adaptive);
        let first = sent.iter().position(|(_, f)| *f == wire::flags::PAIR_FIRST).unwrap();
        let train: Vec<u8> = sent[first..].iter().map(|(_, f)| *f).collect();
        let n = train.len();
        assert!((TRAIN_MIN_PKTS / 2..=TRAIN_MAX_PKTS).contains(&(n as u32)), "{sent:?}");
        assert!(sent[first..].iter().all(|(k, _)| *k == Kind::Data), "{sent:?}");
        assert!(train[1..n - 1].iter().all(|f| *f == wire::flags::TRAIN), "{train:?}");
        assert_eq!(train[n - 1], wire::flags::PAIR_SECOND, "{train:?}");
    }

    #[test]
    fn from_path_memory_the_start_sends_at_its_rate_until_the_first_report() {
        // 23 Mbit/s remembered (a 25 Mbit/s link), polled every 50 us for 60 ms, no report
        // back yet: trains take their periods from the pacing, so what goes out is the rate's.
        // (With trains on top of the pacing, 144 went out against 113 due.)
        let key = |b: u8| PacketKey::new(Algorithm::Aes256Gcm, &[b; 32], [b; 12]);
        let config = ChannelConfig {
            cc: CcKind::Adaptive,
            start_rate_bps: 23_000_000,
            ..ChannelConfig::default()
        };
        let mut sender = Sender::new(config, key(1), key(2), 0).unwrap();
        sender.push(0, 1 << 24);
        let rate_pps = sender.rate_pps();
        let mut buf = vec![0u8; 2048];
        let mut fill = |_: u64, out: &mut [u8]| out.fill(7);
        let mut data = 0u32;
        for now in (0..60_000).step_by(50) {
            while let Some(len) = sender.poll_transmit(now, &mut buf, &mut fill) {
                data += u32::from(Header::parse(&buf[..len]).unwrap().kind == Kind::Data);
            }
        }
        let due = rate_pps * 0.06;
        assert!(f64::from(data) <= 1.05 * due + 2.0, "{data} data packets, {due:.0} due");
        assert!(f64::from(data) >= 0.95 * due, "{data} data packets, {due:.0} due");
    }

    #[test]
    fn a_scavenger_given_a_remembered_rate_starts_cold_with_its_trains() {
        // `low` ignores path memory (`cc::starts_from_memory`), so its start is a first
        // contact's: the first train goes out whole, on top of the pacing.
        let sent = start_with(ChannelConfig {
            cc: CcKind::Low,
            start_rate_bps: 23_000_000,
            ..ChannelConfig::default()
        });
        let first = sent.iter().position(|(_, f)| *f == wire::flags::PAIR_FIRST).unwrap();
        assert!(sent.len() - first >= TRAIN_MIN_PKTS as usize, "{sent:?}");
    }

    #[test]
    fn sending_time_a_late_poll_leaves_beyond_the_catch_up_is_counted() {
        let key = |b: u8| PacketKey::new(Algorithm::Aes256Gcm, &[b; 32], [b; 12]);
        let config = ChannelConfig {
            cc: crate::cc::CcKind::Fixed,
            max_burst_pkts: 4,
            ..ChannelConfig::default()
        };
        // 10,000 packets per second: one every 100 us.
        let config = ChannelConfig { rate_bps: config.packet_size as u64 * 8 * 10_000, ..config };
        let mut sender = Sender::new(config, key(1), key(2), 0).unwrap();
        sender.push(0, 1 << 24);
        let mut buf = vec![0u8; 2048];
        let mut fill = |_: u64, out: &mut [u8]| out.fill(7);
        let mut drain = |sender: &mut Sender, now: u64| {
            while sender.poll_transmit(now, &mut buf, &mut fill).is_some() {}
        };
        // Polled every 100 us: nothing is let go.
        for now in (0..100_000).step_by(100) {
            drain(&mut sender, now);
        }
        assert_eq!(sender.stats().pacing_dropped_us, 0);
        let sent = sender.stats().new_pkts;
        // Polled 10 ms late: four periods are caught up on, the rest (about 9.6 ms) is let go.
        drain(&mut sender, 110_000);
        let caught_up = sender.stats().new_pkts - sent;
        assert!((4..=6).contains(&caught_up), "sent {caught_up} at once");
        let dropped = sender.stats().pacing_dropped_us;
        assert!((9_000..=9_700).contains(&dropped), "let go {dropped} us");
    }
}
