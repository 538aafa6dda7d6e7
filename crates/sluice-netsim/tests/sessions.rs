//! Whole sessions in the simulator: a `Sending` and a `Receiving` machine from
//! `sluice-session` run from the manifest to Verified. Their messages cross a reliable, ordered
//! control channel with a fixed one-way delay (through the codec); each data phase moves over
//! simulated links on `sluice-proto` channels whose work comes from the real data path's chunk
//! plan ([`sluice_netsim::planned`]). The receiver writes into an in-memory store, hashed per
//! file with BLAKE3. No sockets, no clock: virtual microseconds, mapped onto one `Instant`
//! for the machines. Each test prints its seeds.

use std::collections::VecDeque;
use std::ops::Range;
use std::rc::Rc;
use std::time::{Duration, Instant};

use sluice_netsim::planned::{PlanConfig, PlanEnd, PlanOutcome, PlannedTransfer, Store};
use sluice_netsim::{LinkConfig, Sim, SimConfig};
use sluice_proto::config::ChannelConfig;
use sluice_proto::rng::Rng;
use sluice_session::layout::BLOCK_BYTES;
use sluice_session::manifest::{Entry, EntryKind};
use sluice_session::messages::{ErrorCode, ReceiverMsg, SenderMsg, decode, encode};
use sluice_session::{
    Fault, Planned, Received, Receiving, RecvEffect, SendEffect, Sending, Sent, Timeouts,
};

const MIB: usize = 1 << 20;
/// One-way delay of the control channel, and of the data links.
const ONE_WAY_US: u64 = 15_000;
/// Virtual time limit of a session.
const DEADLINE_US: u64 = 120_000_000;

/// What a scenario sets up and breaks.
#[derive(Clone)]
struct Setup {
    sizes: Vec<usize>,
    /// Data links: random loss (both directions) and a blackout window `(from us, to us)`.
    loss: f64,
    blackout_us: Option<(u64, u64)>,
    /// Data link rate in bit/s.
    rate_bps: u64,
    /// Channel `.0` of phase 0 dies this long `.1` (us) after the phase starts.
    kill: Option<(usize, u64)>,
    /// Offsets of the offset space whose written byte is flipped after phase `.0` ends.
    corrupt: Vec<(u32, u64)>,
    /// The receiver has the first bytes of these files already (file, bytes).
    prefill: Vec<(usize, usize)>,
    plan: PlanConfig,
    /// The files are log-like text (they compress) instead of random bytes.
    text: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            sizes: Vec::new(),
            loss: 0.0,
            blackout_us: None,
            rate_bps: 100_000_000,
            kill: None,
            corrupt: Vec::new(),
            prefill: Vec::new(),
            plan: PlanConfig::default(),
            text: false,
        }
    }
}

/// A data phase both ends have opened.
struct Phase {
    number: u32,
    transfer: Option<PlannedTransfer>,
    span: Range<u64>,
    ends: Vec<u64>,
    started_us: u64,
    /// The channel `Setup::kill` names has died.
    killed: bool,
}

struct World {
    seed: u64,
    base: Instant,
    now_us: u64,
    setup: Setup,
    src: Vec<Vec<u8>>,
    wanted: Vec<u32>,
    /// The sender's wanted files end to end.
    source: Rc<[u8]>,
    /// The receiver's wanted files end to end, as written.
    store: Store,
    sender: Sending,
    receiver: Receiving,
    to_receiver: VecDeque<(u64, SenderMsg)>,
    to_sender: VecDeque<(u64, ReceiverMsg)>,
    sim: Sim<PlanEnd>,
    sending: Option<(u32, Vec<Range<u64>>)>,
    /// The receiver's open phase: number, whether bytes move, span, file ends.
    receiving: Option<(u32, bool, Range<u64>, Vec<u64>)>,
    phase: Option<Phase>,
    /// Per data phase that moved bytes: (phase, what its plan did, start us, end us).
    phases: Vec<(u32, PlanOutcome, u64, u64)>,
    sent: Option<Result<Sent, Fault>>,
    received: Option<Result<Received, Fault>>,
}

fn entries(sizes: &[usize]) -> Vec<Entry> {
    let mut list = vec![Entry {
        path: "t".into(),
        kind: EntryKind::Dir,
        size: 0,
        mtime: 0,
        mode: 0o755,
        target: None,
        blake3: None,
    }];
    list.extend(sizes.iter().enumerate().map(|(k, &size)| Entry {
        path: format!("t/{k}"),
        kind: EntryKind::File,
        size: size as u64,
        mtime: 0,
        mode: 0o644,
        target: None,
        blake3: None,
    }));
    list
}

/// `len` bytes of log-like text, which zstd shrinks several times.
fn text(len: usize, rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 64);
    while out.len() < len {
        let line = format!("{} block moved status ok {}\n", out.len(), rng.next_u64() % 97);
        out.extend_from_slice(line.as_bytes());
    }
    out.truncate(len);
    out
}

fn blocks_of(data: &[u8]) -> Vec<blake3::Hash> {
    data.chunks(BLOCK_BYTES as usize).map(blake3::hash).collect()
}

impl World {
    fn new(seed: u64, setup: Setup) -> World {
        let mut rng = Rng::new(seed);
        let src = setup
            .sizes
            .iter()
            .map(|&n| match setup.text {
                true => text(n, &mut rng),
                false => (0..n).map(|_| rng.next_u64() as u8).collect(),
            })
            .collect();
        let mut link = LinkConfig::default()
            .with_rate(setup.rate_bps, setup.rate_bps / 8 / 10)
            .with_delay(ONE_WAY_US)
            .with_bernoulli_loss(setup.loss);
        if let Some((from, to)) = setup.blackout_us {
            link = link.with_blackout(from, to);
        }
        let base = Instant::now();
        let timeouts = Timeouts::default();
        World {
            seed,
            base,
            now_us: 0,
            sender: Sending::new(base, &entries(&setup.sizes), timeouts),
            receiver: Receiving::new(base, timeouts),
            setup,
            src,
            wanted: Vec::new(),
            source: Rc::from(Vec::new()),
            store: Store::default(),
            to_receiver: VecDeque::new(),
            to_sender: VecDeque::new(),
            sim: Sim::new(SimConfig::symmetric(seed, link)),
            sending: None,
            receiving: None,
            phase: None,
            phases: Vec::new(),
            sent: None,
            received: None,
        }
    }

    fn now(&self) -> Instant {
        self.base + Duration::from_micros(self.now_us)
    }

    fn us(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.base).as_micros() as u64
    }

    /// Takes every effect of both machines: messages go on the control channel, file jobs
    /// are done at once (they take no virtual time), data phases open.
    fn collect(&mut self) {
        loop {
            let mut any = false;
            while let Some(effect) = self.sender.poll_effect() {
                any = true;
                self.sender_effect(effect);
            }
            while let Some(effect) = self.receiver.poll_effect() {
                any = true;
                self.receiver_effect(effect);
            }
            if !any {
                return;
            }
        }
    }

    fn sender_effect(&mut self, effect: SendEffect) {
        let now = self.now();
        match effect {
            SendEffect::Send(msg) => {
                let msg: SenderMsg = decode(&encode(&msg).unwrap()).unwrap();
                self.to_receiver.push_back((self.now_us + ONE_WAY_US, msg));
            }
            SendEffect::Wanted { files, .. } | SendEffect::Early { files } => {
                let space: Vec<u8> =
                    files.iter().flat_map(|&n| self.src[n as usize].iter().copied()).collect();
                self.source = Rc::from(space);
                self.wanted = files;
            }
            SendEffect::Done(outcome) => self.sent = Some(outcome),
            SendEffect::StopHashing => {}
            SendEffect::StopData => {
                if let Some((phase, _)) = self.sending.take() {
                    self.sender.handle_data_ended(now, phase);
                }
            }
            SendEffect::StartData { phase, ranges, .. } => self.sending = Some((phase, ranges)),
            SendEffect::CancelData => self.sending = None,
            SendEffect::CheckResume(offers) => {
                let kept = offers
                    .iter()
                    .map(|(k, theirs)| {
                        let file = &self.src[self.wanted[*k as usize] as usize];
                        let mine = blocks_of(file);
                        let same = mine.iter().zip(theirs).take_while(|(a, b)| a == b).count();
                        (same as u64 * BLOCK_BYTES).min(file.len() as u64)
                    })
                    .collect();
                self.sender.handle_resume_checked(now, kept);
            }
            SendEffect::Bind { phase } => self.sender.handle_bound(now, phase, vec![9]),
            SendEffect::HashFiles => {
                let hashes =
                    self.wanted.iter().map(|&n| blake3::hash(&self.src[n as usize])).collect();
                self.sender.handle_hashed(now, hashes);
            }
            SendEffect::HashBlocks(files) => {
                let hashed = files
                    .iter()
                    .map(|&k| blocks_of(&self.src[self.wanted[k as usize] as usize]))
                    .collect();
                self.sender.handle_blocks_hashed(now, hashed);
            }
        }
    }

    /// The receiver's wanted file `k` in the store.
    fn stored(&self, k: usize) -> Vec<u8> {
        let sizes: Vec<usize> = self.wanted.iter().map(|&n| self.setup.sizes[n as usize]).collect();
        let at: usize = sizes[..k].iter().sum();
        self.store.borrow()[at..at + sizes[k]].to_vec()
    }

    fn receiver_effect(&mut self, effect: RecvEffect) {
        let now = self.now();
        match effect {
            RecvEffect::Send(msg) => {
                let msg: ReceiverMsg = decode(&encode(&msg).unwrap()).unwrap();
                self.to_sender.push_back((self.now_us + ONE_WAY_US, msg));
            }
            RecvEffect::Done(outcome) => self.received = Some(outcome),
            RecvEffect::DropEarly => {}
            RecvEffect::StopData => {
                self.receiving = None;
                self.phase = None;
            }
            RecvEffect::StartData { phase, peer_ports, span, present, ends } => {
                if phase == 0 {
                    // Bytes outside `present` are not there yet.
                    let mut store = self.store.borrow_mut();
                    let mut cleared = vec![0u8; store.len()];
                    for r in &present {
                        let (a, b) = (r.start as usize, r.end as usize);
                        cleared[a..b].copy_from_slice(&store[a..b]);
                    }
                    *store = cleared;
                }
                self.receiving = Some((phase, peer_ports.is_some(), span, ends));
            }
            RecvEffect::Plan(entries) => {
                let count = entries.iter().filter(|e| e.kind == EntryKind::File).count();
                let files: Vec<u32> = (0..count as u32).collect();
                let total: usize = self.setup.sizes.iter().sum();
                self.store.replace(vec![0; total]);
                let mut offers = Vec::new();
                for (file, len) in self.setup.prefill.clone() {
                    let at: usize = self.setup.sizes[..file].iter().sum();
                    let whole = len / BLOCK_BYTES as usize * BLOCK_BYTES as usize;
                    let mut store = self.store.borrow_mut();
                    store[at..at + len].copy_from_slice(&self.src[file][..len]);
                    offers.push((file as u32, blocks_of(&store[at..at + whole])));
                }
                let planned = Planned { files, replaced: 0, kept: 0, offers, dry_run: false };
                self.receiver.handle_planned(now, planned);
            }
            RecvEffect::Bind { phase } => self.receiver.handle_bound(now, phase, vec![7]),
            RecvEffect::HashBlocks(files) => {
                let hashed = files.iter().map(|&k| blocks_of(&self.stored(k as usize))).collect();
                self.receiver.handle_blocks_hashed(now, hashed);
            }
            RecvEffect::Commit { expected, actual } => {
                let result = if expected == actual {
                    Ok(())
                } else {
                    Err((ErrorCode::Integrity, "a file did not match".to_owned()))
                };
                self.receiver.handle_committed(result);
            }
        }
    }

    /// Opens the data phase once both ends have started it.
    fn open_phase(&mut self) {
        if self.phase.is_some() {
            return;
        }
        let Some((number, moves, span, ends)) = self.receiving.clone() else { return };
        let transfer = if moves {
            let Some((s, ranges)) = self.sending.clone() else { return };
            if s != number {
                return;
            }
            for r in &ranges {
                assert!(span.start <= r.start && r.end <= span.end, "{r:?} outside {span:?}");
            }
            let seed = self.seed;
            let channel = move |c: usize| ChannelConfig {
                seed: seed ^ (u64::from(number) << 8) ^ c as u64,
                initial_rtt_us: 2 * ONE_WAY_US,
                ..ChannelConfig::default()
            };
            let key_seed = seed.wrapping_add(u64::from(number) << 16);
            let plan = PlanConfig { key_seed, ..self.setup.plan.clone() };
            let t = PlannedTransfer::start(
                &mut self.sim,
                &ranges,
                &self.source,
                &self.store,
                plan,
                channel,
                self.now_us,
            )
            .expect("valid channel config");
            Some(t)
        } else {
            None
        };
        self.phase =
            Some(Phase { number, transfer, span, ends, started_us: self.now_us, killed: false });
    }

    /// Ends the open phase: the receiver hashes what it wrote; both ends see the data end.
    fn close_phase(&mut self) {
        let phase = self.phase.take().expect("a phase");
        let now = self.now();
        if let Some(t) = &phase.transfer {
            // The receivers' arrival record (the real data path's) agrees with the plan: the
            // phase ends with every byte of its ranges there, each counted once.
            let arrivals = t.arrivals();
            assert!(arrivals.complete(), "phase {}: {arrivals:?}", phase.number);
            assert_eq!(arrivals.bytes(), t.outcome().acked_bytes, "phase {}", phase.number);
            drop(arrivals);
            self.phases.push((phase.number, t.outcome(), phase.started_us, self.now_us));
        }
        for &(p, at) in &self.setup.corrupt {
            if p == phase.number && phase.span.contains(&at) {
                self.store.borrow_mut()[at as usize] ^= 0x01;
            }
        }
        let mut hashes = Vec::new();
        let mut at = phase.span.start as usize;
        for end in phase.ends {
            hashes.push(blake3::hash(&self.store.borrow()[at..end as usize]));
            at = end as usize;
        }
        self.receiving = None;
        self.receiver.handle_received(now, phase.number, hashes);
        self.receiver.handle_data_ended(now, phase.number);
        if phase.transfer.is_some()
            && let Some((s, _)) = self.sending.take()
        {
            self.sender.handle_data_ended(now, s);
        }
    }

    fn run(&mut self) {
        while self.now_us < DEADLINE_US {
            self.collect();
            if self.sent.is_some() && self.received.is_some() {
                return;
            }
            self.open_phase();
            // The next thing that happens outside the data: a message arrives, a deadline.
            let timeouts = [self.sender.poll_timeout(), self.receiver.poll_timeout()];
            let mut next = timeouts
                .into_iter()
                .flatten()
                .map(|t| self.us(t))
                .chain(self.to_receiver.front().map(|m| m.0))
                .chain(self.to_sender.front().map(|m| m.0))
                .min()
                .unwrap_or(DEADLINE_US)
                .max(self.now_us);
            let kill = self.setup.kill;
            let data_done = match &mut self.phase {
                Some(Phase { transfer: Some(t), number: 0, started_us, killed, .. })
                    if kill.is_some() && !*killed =>
                {
                    let (channel, after_us) = kill.expect("checked");
                    next = next.min(*started_us + after_us);
                    let done = t.advance(&mut self.sim, next);
                    self.now_us = if done { self.sim.now_us().max(self.now_us) } else { next };
                    if !done && self.now_us >= *started_us + after_us {
                        t.kill(&mut self.sim, channel);
                        *killed = true;
                    }
                    done
                }
                Some(Phase { transfer: Some(t), .. }) => {
                    let done = t.advance(&mut self.sim, next);
                    self.now_us = if done { self.sim.now_us().max(self.now_us) } else { next };
                    done
                }
                Some(Phase { transfer: None, .. }) => true,
                None => {
                    self.now_us = next;
                    false
                }
            };
            if data_done {
                self.close_phase();
                continue;
            }
            let now = self.now();
            while self.to_receiver.front().is_some_and(|m| m.0 <= self.now_us) {
                let (_, msg) = self.to_receiver.pop_front().unwrap();
                self.receiver.handle_message(now, msg);
            }
            while self.to_sender.front().is_some_and(|m| m.0 <= self.now_us) {
                let (_, msg) = self.to_sender.pop_front().unwrap();
                self.sender.handle_message(now, msg);
            }
            self.sender.handle_timeout(now);
            self.receiver.handle_timeout(now);
        }
        panic!("seed {}: no end by {DEADLINE_US} us", self.seed);
    }

    /// Asserts both machines ended well and every wanted file is byte-identical.
    fn verified(&self) -> (&Sent, &Received) {
        let sent = self.sent.as_ref().unwrap().as_ref().expect("sent");
        let received = self.received.as_ref().unwrap().as_ref().expect("received");
        assert_eq!(sent.digests, received.digests);
        for (k, &n) in self.wanted.iter().enumerate() {
            let src = &self.src[n as usize];
            assert!(self.stored(k) == *src, "seed {}: file {n} differs", self.seed);
            assert_eq!(received.digests[k], blake3::hash(src));
        }
        (sent, received)
    }

    /// Bytes the data phases moved (acknowledged by the plans).
    fn moved(&self) -> u64 {
        self.phases.iter().map(|p| p.1.acked_bytes).sum()
    }

    /// Data packets sent again, over all channels.
    fn retransmitted(&self) -> u64 {
        self.sim
            .flows()
            .iter()
            .map(|f| match &f.a {
                PlanEnd::Sender { sender, .. } => sender.stats().retransmitted_pkts,
                PlanEnd::Receiver { .. } => 0,
            })
            .sum()
    }
}

fn run(setup: &Setup, seeds: std::ops::RangeInclusive<u64>) -> Vec<World> {
    seeds
        .map(|seed| {
            eprintln!("seed {seed}");
            let mut world = World::new(seed, setup.clone());
            world.run();
            eprintln!("seed {seed}: ended at {} us; data phases {:?}", world.now_us, world.phases);
            world
        })
        .collect()
}

#[test]
fn a_session_survives_seeded_random_loss() {
    let setup = Setup { sizes: vec![3 * MIB, 1000, 0], loss: 0.02, ..Setup::default() };
    for world in run(&setup, 1..=3) {
        let (sent, received) = world.verified();
        assert_eq!(sent.repaired, 0);
        assert_eq!(received.resumed, 0);
        assert_eq!(world.moved(), (3 * MIB + 1000) as u64);
        assert_eq!(world.phases.len(), 1);
        assert!(world.retransmitted() > 0, "seed {}: 2% loss, no repair", world.seed);
        // Every channel took a share, first come, first served.
        assert!(world.phases[0].1.channel_bytes.iter().all(|&b| b > 0), "{:?}", world.phases);
    }
}

#[test]
fn a_session_survives_a_blackout() {
    // 4 MiB at 50 Mbit/s take about 0.7 s; the links go dark from 0.2 s to 0.7 s.
    let blackout = (200_000, 700_000);
    let setup = Setup {
        sizes: vec![4 * MIB],
        rate_bps: 50_000_000,
        blackout_us: Some(blackout),
        ..Setup::default()
    };
    for world in run(&setup, 1..=3) {
        world.verified();
        assert_eq!(world.moved(), 4 * MIB as u64);
        let (_, _, start, end) = world.phases[0];
        assert!(start < blackout.0 && end > blackout.1, "the data ran {start}..{end} us");
        // The data took the blackout longer than it would have on its own.
        assert!(end - start > 700_000 + (blackout.1 - blackout.0) / 2, "{start}..{end} us");
        assert!(world.sim.forward_stats().dropped_blackout.packets > 0);
    }
}

#[test]
fn a_dead_channels_chunks_go_to_the_others() {
    let setup = Setup {
        sizes: vec![4 * MIB, 12_345],
        kill: Some((1, 60_000)),
        loss: 0.01,
        ..Setup::default()
    };
    for world in run(&setup, 1..=3) {
        world.verified();
        let total = (4 * MIB + 12_345) as u64;
        assert_eq!(world.moved(), total);
        let outcome = &world.phases[0].1;
        assert_eq!(outcome.dead, vec![1]);
        assert!(outcome.given_back > 0, "{outcome:?}");
        assert!(outcome.channel_bytes[1] < total / 3, "{outcome:?}");
        assert_eq!(outcome.channel_bytes.iter().sum::<u64>(), total);
    }
}

#[test]
fn a_corrupted_block_is_repaired_over_the_network() {
    let at = BLOCK_BYTES + 77; // file 0, block 1
    let size = BLOCK_BYTES as usize + MIB;
    let setup =
        Setup { sizes: vec![size, 4], corrupt: vec![(0, at)], loss: 0.005, ..Setup::default() };
    for world in run(&setup, 1..=3) {
        let (sent, received) = world.verified();
        assert_eq!(sent.repaired, 1);
        assert_eq!(received.repaired, 1);
        let phases: Vec<(u32, u64)> = world.phases.iter().map(|p| (p.0, p.1.acked_bytes)).collect();
        assert_eq!(phases, vec![(0, size as u64 + 4), (1, MIB as u64)], "one block again");
    }
}

#[test]
fn a_resumed_transfer_moves_only_the_rest() {
    let size = BLOCK_BYTES as usize + MIB;
    let setup = Setup {
        sizes: vec![size, 1000],
        prefill: vec![(0, BLOCK_BYTES as usize + 5)],
        loss: 0.01,
        ..Setup::default()
    };
    for world in run(&setup, 1..=3) {
        let (sent, received) = world.verified();
        assert_eq!(received.resumed, BLOCK_BYTES);
        assert_eq!(sent.moved, (MIB + 1000) as u64);
        assert_eq!(world.moved(), (MIB + 1000) as u64);
    }
}

#[test]
fn a_compressed_session_survives_loss_and_a_dead_channel() {
    let setup = Setup {
        sizes: vec![3 * MIB, 777, 0],
        loss: 0.01,
        kill: Some((1, 40_000)),
        plan: PlanConfig { compress: Some(3), ..PlanConfig::default() },
        text: true,
        ..Setup::default()
    };
    for world in run(&setup, 1..=3) {
        world.verified();
        let outcome = &world.phases[0].1;
        assert_eq!(outcome.dead, vec![1], "{outcome:?}");
    }
}
