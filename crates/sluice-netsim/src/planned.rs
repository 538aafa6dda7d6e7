//! A multi-channel transfer whose channels take their work from the chunk plan of the real
//! data path ([`sluice_session::chunks`]) instead of fixed stripes: each channel takes the next
//! chunk when its sender's queue runs low (first come, first served), credits the plan from
//! its sender's cumulative acknowledged bytes, and a channel that dies (killed by the test, or
//! closed by its protocol) hands its unacknowledged rest back for the others to take.
//!
//! The bytes are real: senders read a shared source (the sending end's byte space) and
//! receivers write what they deliver into a shared store at its offset, so a session driver
//! can hash the store per file. With [`PlanConfig::compress`] the senders cut their chunks into
//! pieces and send each that shrinks as a zstd frame, and the receivers gather and inflate the
//! frames: the real data path's framing ([`sluice_session::compress`]).
//!
//! Use: build one [`Sim<PlanEnd>`](crate::Sim) for a whole session, a [`PlannedTransfer`] per
//! data phase, and call [`PlannedTransfer::advance`] until it reports done. The existing
//! [`scenario`](crate::scenario)s keep their stripes, so their traces stay as they were.

use std::cell::RefCell;
use std::ops::Range;
use std::rc::Rc;

use sluice_proto::config::ChannelConfig;
use sluice_proto::receiver::{Receiver, State};
use sluice_proto::sender::{REASON_DONE, Sender};
use sluice_session::arrivals::Arrivals;
use sluice_session::chunks::{Plan, Taken};
use sluice_session::compress::{COMPRESS_BLOCK_BYTES, COMPRESSED, Deflater, Inflater, piece_at};

use crate::channel::test_keys;
use crate::{Endpoint, FlowConfig, Sim};

/// The bytes a receiving end has written, shared by all channels of a session.
pub type Store = Rc<RefCell<Vec<u8>>>;

/// Either end of a plan-driven channel.
#[derive(Debug)]
pub enum PlanEnd {
    /// The data source, fed from the plan between runs.
    Sender {
        /// The protocol state machine.
        sender: Box<Sender>,
        /// The sending end's byte space.
        source: Rc<[u8]>,
        /// The compressor, when pieces are compressed.
        deflater: Option<Box<Deflater>>,
        /// Killed: the channel no longer sends, receives or wakes.
        dead: bool,
    },
    /// The data sink.
    Receiver {
        /// The protocol state machine.
        receiver: Box<Receiver>,
        /// Where delivered bytes are written.
        store: Store,
        /// Payload bytes delivered (each delivery counted, duplicates too).
        delivered: u64,
        /// What the phase's channels delivered, each byte once: the real data path's record.
        arrivals: Rc<RefCell<Arrivals>>,
        /// The decompressor, when pieces are compressed.
        inflater: Option<Box<Inflater>>,
        /// Compressed frames that broke the rules (a bug: the real receiver fails on one).
        bad_frames: u64,
        /// Killed.
        dead: bool,
    },
}

impl PlanEnd {
    fn kill(&mut self) {
        match self {
            PlanEnd::Sender { dead, .. } | PlanEnd::Receiver { dead, .. } => *dead = true,
        }
    }

    fn sender_mut(&mut self) -> Option<&mut Sender> {
        self.sending().map(|(sender, _, _)| sender)
    }

    /// A live sender with its compressor and source.
    fn sending(&mut self) -> Option<(&mut Sender, Option<&mut Deflater>, &[u8])> {
        match self {
            PlanEnd::Sender { sender, deflater, source, dead: false } => {
                Some((sender.as_mut(), deflater.as_deref_mut(), &source[..]))
            }
            _ => None,
        }
    }

    /// Compressed frames this receiving end found broken.
    pub fn bad_frames(&self) -> u64 {
        match self {
            PlanEnd::Receiver { bad_frames, .. } => *bad_frames,
            PlanEnd::Sender { .. } => 0,
        }
    }

    /// Payload bytes this receiving end delivered.
    pub fn delivered(&self) -> u64 {
        match self {
            PlanEnd::Receiver { delivered, .. } => *delivered,
            PlanEnd::Sender { .. } => 0,
        }
    }
}

impl Endpoint for PlanEnd {
    fn handle_datagram(&mut self, now_us: u64, datagram: &mut [u8]) {
        match self {
            PlanEnd::Sender { sender, dead: false, .. } => sender.handle_datagram(now_us, datagram),
            PlanEnd::Receiver {
                receiver,
                store,
                delivered,
                arrivals,
                inflater,
                bad_frames,
                dead: false,
            } => {
                let mut deliver = |offset: u64, payload: &[u8]| {
                    *delivered += payload.len() as u64;
                    if offset & COMPRESSED == 0 {
                        let at = offset as usize;
                        store.borrow_mut()[at..at + payload.len()].copy_from_slice(payload);
                        arrivals.borrow_mut().record(offset, payload.len() as u64);
                        return;
                    }
                    let piece = piece_at(arrivals.borrow().parts(), offset & !COMPRESSED);
                    let (Some(piece), Some(inflater)) = (piece, inflater.as_mut()) else {
                        *bad_frames += 1;
                        return;
                    };
                    match inflater.accept(piece.clone(), offset, payload) {
                        Ok(Some(bytes)) => {
                            let at = piece.start as usize;
                            store.borrow_mut()[at..at + bytes.len()].copy_from_slice(bytes);
                            arrivals.borrow_mut().record(piece.start, bytes.len() as u64);
                        }
                        Ok(None) => {}
                        Err(_) => *bad_frames += 1,
                    }
                };
                if let Ok(Some(d)) = receiver.handle_datagram(now_us, datagram) {
                    deliver(d.offset, &datagram[d.range.clone()]);
                }
                while let Some(rebuilt) = receiver.poll_recovered() {
                    deliver(rebuilt.offset, &rebuilt.payload);
                }
            }
            _ => {}
        }
    }

    fn handle_timeout(&mut self, now_us: u64) {
        match self {
            PlanEnd::Sender { sender, dead: false, .. } => sender.handle_timeout(now_us),
            PlanEnd::Receiver { receiver, dead: false, .. } => receiver.handle_timeout(now_us),
            _ => {}
        }
    }

    fn poll_transmit(&mut self, now_us: u64, buf: &mut [u8]) -> Option<usize> {
        match self {
            PlanEnd::Sender { sender, source, deflater, dead: false } => {
                let deflater = deflater.as_deref();
                let mut fill = |offset: u64, dst: &mut [u8]| match deflater {
                    Some(d) if offset & COMPRESSED != 0 => {
                        // The frame was kept until acknowledged: a miss is a simulator bug.
                        d.fill(offset, dst).expect("the frame of a compressed payload");
                    }
                    _ => {
                        let at = offset as usize;
                        dst.copy_from_slice(&source[at..at + dst.len()]);
                    }
                };
                sender.poll_transmit(now_us, buf, &mut fill)
            }
            PlanEnd::Receiver { receiver, dead: false, .. } => receiver.poll_transmit(now_us, buf),
            _ => None,
        }
    }

    fn poll_timeout(&self) -> Option<u64> {
        match self {
            PlanEnd::Sender { sender, dead: false, .. } => sender.poll_timeout(),
            PlanEnd::Receiver { receiver, dead: false, .. } => receiver.poll_timeout(),
            _ => None,
        }
    }

    fn is_done(&self) -> bool {
        match self {
            PlanEnd::Sender { sender, dead: false, .. } => sender.state() != State::Open,
            PlanEnd::Receiver { receiver, dead: false, .. } => receiver.state() != State::Open,
            _ => true,
        }
    }
}

/// How a plan-driven transfer runs.
#[derive(Debug, Clone)]
pub struct PlanConfig {
    /// Data channels.
    pub channels: usize,
    /// Chunk size of the plan (the real path uses [`sluice_session::chunks::CHUNK_BYTES`];
    /// small files want smaller chunks to spread over the channels).
    pub chunk_bytes: u64,
    /// A channel takes more when its sender has fewer unsent bytes than this.
    pub low_water_bytes: u64,
    /// How often (virtual us) the driver serves the plan: credits acknowledgements, refills
    /// senders, notices channels that ended.
    pub turn_us: u64,
    /// Seed of the channels' keys: channel `c` uses `key_seed + c`.
    pub key_seed: u64,
    /// Compress each piece that shrinks at this zstd level, as the real data path does.
    pub compress: Option<i32>,
}

impl Default for PlanConfig {
    fn default() -> Self {
        Self {
            channels: 3,
            chunk_bytes: 256 << 10,
            low_water_bytes: 128 << 10,
            turn_us: 2_000,
            key_seed: 0,
            compress: None,
        }
    }
}

/// One channel's share of the plan.
#[derive(Debug)]
struct Lane {
    flow: usize,
    taken: Taken,
    alive: bool,
    /// Bytes of the plan this channel had acknowledged.
    acked: u64,
    finished: bool,
}

/// What a plan-driven transfer did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanOutcome {
    /// Bytes of the plan acknowledged (every byte once).
    pub acked_bytes: u64,
    /// Per channel: bytes of the plan it had acknowledged.
    pub channel_bytes: Vec<u64>,
    /// Channels that died (killed, or closed without finishing).
    pub dead: Vec<usize>,
    /// Bytes handed back to the plan by channels that died.
    pub given_back: u64,
}

/// One data phase: a plan over the ranges to send, and a channel pair per lane in the
/// simulator.
#[derive(Debug)]
pub struct PlannedTransfer {
    plan: Plan,
    /// What the receivers delivered, each byte once.
    arrivals: Rc<RefCell<Arrivals>>,
    lanes: Vec<Lane>,
    config: PlanConfig,
    given_back: u64,
}

impl PlannedTransfer {
    /// Adds `config.channels` channel pairs to `sim`, starting at `start_us`, that move the
    /// bytes `ranges` of `source` into `store`. Channel `c` uses `channel_config(c)`.
    pub fn start(
        sim: &mut Sim<PlanEnd>,
        ranges: &[Range<u64>],
        source: &Rc<[u8]>,
        store: &Store,
        config: PlanConfig,
        channel_config: impl Fn(usize) -> ChannelConfig,
        start_us: u64,
    ) -> Result<Self, sluice_proto::config::ConfigError> {
        let plan = Plan::new(ranges, config.chunk_bytes);
        let arrivals = Rc::new(RefCell::new(receive_record(ranges)));
        let mut lanes = Vec::new();
        for c in 0..config.channels.max(1) {
            let cfg = channel_config(c);
            let [(s_tx, s_rx), (r_tx, r_rx)] =
                test_keys(&cfg, config.key_seed.wrapping_add(c as u64));
            let sender = Sender::new(cfg.clone(), s_tx, s_rx, start_us)?;
            let receiver = Receiver::new(cfg, r_tx, r_rx, start_us)?;
            let deflater = config
                .compress
                .map(|level| Box::new(Deflater::new(level).expect("a zstd compressor")));
            let inflater =
                config.compress.map(|_| Box::new(Inflater::new().expect("a zstd decompressor")));
            let a = PlanEnd::Sender {
                sender: Box::new(sender),
                source: Rc::clone(source),
                deflater,
                dead: false,
            };
            let b = PlanEnd::Receiver {
                receiver: Box::new(receiver),
                store: Rc::clone(store),
                delivered: 0,
                arrivals: Rc::clone(&arrivals),
                inflater,
                bad_frames: 0,
                dead: false,
            };
            let flow = sim.add_flow(a, b, FlowConfig::starting_at(start_us));
            lanes.push(Lane {
                flow,
                taken: Taken::default(),
                alive: true,
                acked: 0,
                finished: false,
            });
        }
        let mut transfer = Self { plan, arrivals, lanes, config, given_back: 0 };
        transfer.serve(sim);
        Ok(transfer)
    }

    /// The plan the channels share.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// What the receivers have delivered, each byte once (the arrival record the real data
    /// path keeps): complete once every byte of the ranges arrived.
    pub fn arrivals(&self) -> std::cell::Ref<'_, Arrivals> {
        self.arrivals.borrow()
    }

    /// The simulator's flow of channel `c`.
    pub fn flow(&self, c: usize) -> usize {
        self.lanes[c].flow
    }

    /// Kills channel `c` now: both its ends stop, and its unacknowledged rest goes back to the
    /// plan.
    pub fn kill(&mut self, sim: &mut Sim<PlanEnd>, c: usize) {
        let lane = &mut self.lanes[c];
        if !lane.alive {
            return;
        }
        let flow = sim.flow_mut(lane.flow);
        flow.a.kill();
        flow.b.kill();
        self.bury(c);
    }

    fn bury(&mut self, c: usize) {
        let lane = &mut self.lanes[c];
        lane.alive = false;
        let rest = lane.taken.unacked();
        self.given_back += rest.iter().map(|r| r.end - r.start).sum::<u64>();
        self.plan.give_back(rest);
    }

    /// Credits acknowledgements, buries channels that closed early, refills the live senders
    /// from the plan (as the real channel loop does), and finishes them once all is done.
    fn serve(&mut self, sim: &mut Sim<PlanEnd>) {
        for c in 0..self.lanes.len() {
            if !self.lanes[c].alive {
                continue;
            }
            let flow = self.lanes[c].flow;
            let Some((sender, mut deflater, source)) = sim.flow_mut(flow).a.sending() else {
                continue;
            };
            let before = self.plan.acked_bytes();
            let alive = self.lanes.iter().filter(|l| l.alive).count();
            let lane = &mut self.lanes[c];
            let acked = sender.stats().acked_bytes;
            lane.taken.credit(acked, &self.plan, &mut |start| {
                if let Some(d) = deflater.as_deref_mut() {
                    d.done(start);
                }
            });
            lane.acked += self.plan.acked_bytes() - before;
            if let State::Closed(reason) = sender.state()
                && (reason != REASON_DONE || !lane.finished)
            {
                self.bury(c);
                continue;
            }
            let grid = if deflater.is_some() { COMPRESS_BLOCK_BYTES } else { u64::MAX };
            while sender.unsent_bytes() < self.config.low_water_bytes {
                let Some(next) = lane.taken.next(grid) else {
                    let chunk = self.plan.take();
                    sender.expect_more(chunk.is_some());
                    let Some(chunk) = chunk else { break };
                    lane.taken.take(chunk);
                    continue;
                };
                // As the real channel does: a piece handed back partly acknowledged goes raw.
                let frame = match deflater.as_deref_mut() {
                    Some(d) if self.plan.whole_piece(&next) => {
                        let read = |at: u64, dst: &mut [u8]| {
                            let at = at as usize;
                            dst.copy_from_slice(&source[at..at + dst.len()]);
                            Ok(())
                        };
                        d.piece(next.clone(), read).expect("reading the source cannot fail")
                    }
                    _ => None,
                };
                match frame {
                    Some(wire) => sender.push(COMPRESSED | next.start, wire),
                    None => sender.push(next.start, next.end - next.start),
                }
                lane.taken.pushed(next, frame);
            }
            // As the real channel does: the tail's code begins near the end.
            sender.expect_more_bytes(lane.taken.expected_more(&self.plan, alive));
        }
        if self.plan.done() {
            for lane in self.lanes.iter_mut().filter(|l| l.alive && !l.finished) {
                if let Some(sender) = sim.flow_mut(lane.flow).a.sender_mut() {
                    sender.finish();
                    lane.finished = true;
                }
            }
        }
    }

    /// Whether every byte is acknowledged and every live sender has closed the channel.
    pub fn done(&self, sim: &Sim<PlanEnd>) -> bool {
        self.plan.done()
            && self.lanes.iter().filter(|l| l.alive).all(|l| sim.flow(l.flow).a.is_done())
    }

    /// Runs the simulator in turns of `turn_us` up to `until_us`, serving the plan after each;
    /// returns whether the transfer is done (then it stops early, at the turn it ended).
    pub fn advance(&mut self, sim: &mut Sim<PlanEnd>, until_us: u64) -> bool {
        let mut at = sim.now_us();
        while at < until_us {
            at = (at + self.config.turn_us.max(1)).min(until_us);
            sim.run_until(at, 0, |_, _| {});
            self.serve(sim);
            if self.done(sim) {
                return true;
            }
        }
        self.done(sim)
    }

    /// What the transfer did so far.
    pub fn outcome(&self) -> PlanOutcome {
        PlanOutcome {
            acked_bytes: self.plan.acked_bytes(),
            channel_bytes: self.lanes.iter().map(|l| l.acked).collect(),
            dead: (0..self.lanes.len()).filter(|&c| !self.lanes[c].alive).collect(),
            given_back: self.given_back,
        }
    }
}

/// The record of a receive of `ranges` (increasing): their span, the gaps between them
/// present already.
fn receive_record(ranges: &[Range<u64>]) -> Arrivals {
    let span = match (ranges.first(), ranges.last()) {
        (Some(first), Some(last)) => first.start..last.end.max(first.start),
        _ => 0..0,
    };
    let gaps: Vec<Range<u64>> = ranges.windows(2).map(|w| w[0].end..w[1].start).collect();
    Arrivals::new(span, &gaps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LinkConfig, SimConfig};
    use sluice_proto::rng::Rng;

    const MIB: u64 = 1 << 20;

    fn world(seed: u64, loss: f64, len: usize) -> (Sim<PlanEnd>, Rc<[u8]>, Store) {
        let link = LinkConfig::default()
            .with_rate(200_000_000, 1_000_000)
            .with_delay(10_000)
            .with_bernoulli_loss(loss);
        let sim = Sim::new(SimConfig::symmetric(seed, link));
        let mut rng = Rng::new(seed);
        let source: Rc<[u8]> = (0..len).map(|_| rng.next_u64() as u8).collect();
        (sim, source, Rc::new(RefCell::new(vec![0; len])))
    }

    fn channel(seed: u64) -> impl Fn(usize) -> ChannelConfig {
        move |c| ChannelConfig {
            seed: seed ^ c as u64,
            initial_rtt_us: 20_000,
            ..ChannelConfig::default()
        }
    }

    #[test]
    fn channels_take_chunks_first_come_first_served() {
        for seed in 1..=3 {
            eprintln!("seed {seed}");
            let (mut sim, source, store) = world(seed, 0.01, 3 * MIB as usize + 777);
            let ranges =
                vec![0..source.len() as u64 / 2, source.len() as u64 / 2..source.len() as u64];
            let config = PlanConfig { key_seed: seed, ..PlanConfig::default() };
            let mut t = PlannedTransfer::start(
                &mut sim,
                &ranges,
                &source,
                &store,
                config,
                channel(seed),
                0,
            )
            .unwrap();
            assert!(t.advance(&mut sim, 60_000_000), "seed {seed}: not done");
            assert!(store.borrow()[..] == source[..], "seed {seed}: bytes differ");
            let outcome = t.outcome();
            assert_eq!(outcome.acked_bytes, source.len() as u64);
            assert_eq!(outcome.channel_bytes.iter().sum::<u64>(), source.len() as u64);
            assert!(outcome.channel_bytes.iter().all(|&b| b > 0), "{outcome:?}");
            assert!(outcome.dead.is_empty());
        }
    }

    #[test]
    fn a_killed_channel_hands_its_rest_to_the_others() {
        for seed in 1..=3 {
            eprintln!("seed {seed}");
            let (mut sim, source, store) = world(seed, 0.0, 4 * MIB as usize);
            let ranges = [0..MIB, MIB..4 * MIB];
            let config = PlanConfig { key_seed: seed, ..PlanConfig::default() };
            let mut t = PlannedTransfer::start(
                &mut sim,
                &ranges,
                &source,
                &store,
                config,
                channel(seed),
                0,
            )
            .unwrap();
            // Let the channels get going, then kill one with chunks in hand.
            assert!(!t.advance(&mut sim, 60_000));
            let held = t.lanes[0].taken.unacked();
            assert!(!held.is_empty(), "seed {seed}: channel 0 holds nothing");
            t.kill(&mut sim, 0);
            assert!(t.advance(&mut sim, 60_000_000), "seed {seed}: not done");
            assert!(store.borrow()[..] == source[..], "seed {seed}: bytes differ");
            let outcome = t.outcome();
            assert_eq!(outcome.dead, vec![0]);
            assert_eq!(outcome.given_back, held.iter().map(|r| r.end - r.start).sum::<u64>());
            assert_eq!(outcome.acked_bytes, 4 * MIB);
            assert_eq!(outcome.channel_bytes.iter().sum::<u64>(), 4 * MIB);
            assert!(outcome.channel_bytes[0] < 4 * MIB / 3, "{outcome:?}");
            // The arrival record counts each byte once, however many channels delivered it.
            let arrivals = t.arrivals();
            assert!(arrivals.complete(), "seed {seed}");
            assert_eq!(arrivals.bytes(), 4 * MIB);
            let delivered: u64 = (0..3).map(|c| sim.flow(t.flow(c)).b.delivered()).sum();
            assert!(delivered >= arrivals.bytes(), "seed {seed}: {delivered}");
        }
    }

    /// Seeded log-like text (compresses well), with a stretch of random bytes (does not).
    fn mixed(len: usize, seed: u64) -> Rc<[u8]> {
        let mut rng = Rng::new(seed);
        let mut out = Vec::with_capacity(len + 64);
        while out.len() < len {
            if out.len() >= len / 2 && out.len() < len * 3 / 4 {
                out.extend_from_slice(&rng.next_u64().to_le_bytes());
            } else {
                out.extend_from_slice(
                    format!("{} moved {}\n", out.len(), rng.next_u64() % 97).as_bytes(),
                );
            }
        }
        out.truncate(len);
        out.into()
    }

    #[test]
    fn compressed_pieces_arrive_exactly_also_through_a_dying_channel() {
        for seed in 1..=3 {
            eprintln!("seed {seed}");
            let len = 4 * MIB as usize;
            let (mut sim, _, store) = world(seed, 0.01, len);
            let source = mixed(len, seed);
            let config = PlanConfig { key_seed: seed, compress: Some(3), ..PlanConfig::default() };
            let mut t = PlannedTransfer::start(
                &mut sim,
                std::slice::from_ref(&(0..len as u64)),
                &source,
                &store,
                config,
                channel(seed),
                0,
            )
            .unwrap();
            assert!(!t.advance(&mut sim, 20_000));
            t.kill(&mut sim, 1);
            assert!(t.advance(&mut sim, 60_000_000), "seed {seed}: not done");
            assert!(store.borrow()[..] == source[..], "seed {seed}: bytes differ");
            assert!(t.arrivals().complete(), "seed {seed}");
            let ends = (0..3).map(|c| &sim.flow(t.flow(c)).b);
            let (delivered, bad): (u64, u64) =
                ends.fold((0, 0), |(d, b), e| (d + e.delivered(), b + e.bad_frames()));
            assert_eq!(bad, 0, "seed {seed}");
            // The text went as frames: fewer payload bytes on the wire than the file holds.
            assert!(delivered < len as u64 * 3 / 4, "seed {seed}: {delivered} of {len}");
        }
    }

    #[test]
    fn the_arrival_record_of_ranges_with_gaps_holds_the_gaps_as_present() {
        let record = receive_record(&[0..10, 20..30, 35..40]);
        assert_eq!(record.range(), &(0..40));
        assert_eq!(record.parts(), &[0..10, 20..30, 35..40]);
        assert_eq!(record.missing(), 25);
        assert!(receive_record(&[]).complete());
    }
}
