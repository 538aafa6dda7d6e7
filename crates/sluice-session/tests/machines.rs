//! The two transfer machines driven against each other in memory: files are byte vectors,
//! the data channels copy bytes, and a seeded scheduler picks which pending event happens
//! next, so messages, file jobs and data interleave in many orders. Every message goes
//! through the codec. Each test prints its seeds.

use std::ops::Range;
use std::time::{Duration, Instant};

use sluice_session::layout::BLOCK_BYTES;
use sluice_session::manifest::{Entry, EntryKind};
use sluice_session::messages::{
    ErrorCode, PathStart, ReceiverMsg, SenderMsg, Want, decode, encode,
};
use sluice_session::transfer::RESTART_PHASE;
use sluice_session::{
    Fault, Planned, Received, Receiving, RecvEffect, SendEffect, Sending, Sent, Timeouts,
};

const MIB: usize = 1 << 20;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next() as u8).collect()
}

/// What a scenario sets up and breaks.
#[derive(Clone, Default)]
struct Setup {
    sizes: Vec<usize>,
    /// The receiver has the first bytes of these files already (file, bytes), with the
    /// bytes at these offsets within the file flipped.
    prefill: Vec<(usize, usize, Vec<usize>)>,
    /// Offsets of the offset space whose written byte is flipped, in these phases.
    corrupt: Vec<(u32, u64)>,
    dry_run: bool,
    /// Files the receiver does not want.
    unwanted: Vec<usize>,
    /// The sender's `Digests` are lost.
    lose_digests: bool,
    /// The receiver fails while the data moves.
    receiver_fails: bool,
    /// The data starts early: the receiver's phase-0 sockets were bound beforehand.
    early: bool,
    /// ... but they are gone by the time the transfer begins.
    early_sockets_gone: bool,
}

enum Event {
    ToReceiver(SenderMsg),
    ToSender(ReceiverMsg),
    SenderJob(SendEffect),
    ReceiverJob(RecvEffect),
    /// Both ends of a phase are open: the bytes move.
    Data(u32),
    /// The sender's channels of a phase see their last acknowledgement (after the bytes
    /// moved, at any time: the receiver may answer first).
    SenderDataEnded(u32),
}

type OpenReceive = (u32, Option<Vec<u16>>, Range<u64>, Vec<u64>);

struct World {
    rng: Rng,
    now: Instant,
    setup: Setup,
    src: Vec<Vec<u8>>,
    /// The receiver's files, one per wanted file, once planned.
    dst: Vec<Vec<u8>>,
    wanted: Vec<u32>,
    sender: Sending,
    receiver: Receiving,
    events: Vec<Event>,
    sending: Option<(u32, Vec<Range<u64>>)>,
    /// The receiver's open phase: its number, the sender's ports, span and file ends.
    receiving: Option<OpenReceive>,
    sent: Option<Result<Sent, Fault>>,
    received: Option<Result<Received, Fault>>,
    moved: u64,
    messages: usize,
    /// The receiver's `Ready` messages.
    receiver_readies: usize,
    /// The receiver closed its early sockets.
    dropped_early: bool,
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

fn blocks_of(data: &[u8]) -> Vec<blake3::Hash> {
    data.chunks(BLOCK_BYTES as usize).map(blake3::hash).collect()
}

impl World {
    fn new(seed: u64, setup: Setup) -> World {
        let mut rng = Rng(seed.max(1));
        let src = setup.sizes.iter().map(|&n| bytes(&mut rng, n)).collect();
        let now = Instant::now();
        let timeouts = Timeouts::default();
        let list = entries(&setup.sizes);
        let (sender, receiver) = if setup.early {
            let sender = Sending::new_early(now, &list, timeouts, vec![7, 7]);
            (sender, Receiving::new_early(now, timeouts, !setup.early_sockets_gone))
        } else {
            (Sending::new(now, &list, timeouts), Receiving::new(now, timeouts))
        };
        World {
            rng,
            now,
            sender,
            receiver,
            setup,
            src,
            dst: Vec::new(),
            wanted: Vec::new(),
            events: Vec::new(),
            sending: None,
            receiving: None,
            sent: None,
            received: None,
            moved: 0,
            messages: 0,
            receiver_readies: 0,
            dropped_early: false,
        }
    }

    /// The sender's wanted files end to end.
    fn source_space(&self) -> Vec<u8> {
        self.wanted.iter().flat_map(|&n| self.src[n as usize].clone()).collect()
    }

    fn collect(&mut self) {
        while let Some(effect) = self.sender.poll_effect() {
            match effect {
                SendEffect::Send(msg) => {
                    let msg: SenderMsg = decode(&encode(&msg).unwrap()).unwrap();
                    self.messages += 1;
                    if self.setup.lose_digests && matches!(msg, SenderMsg::Digests { .. }) {
                        continue;
                    }
                    self.events.push(Event::ToReceiver(msg));
                }
                SendEffect::Wanted { files, .. } | SendEffect::Early { files } => {
                    self.wanted = files;
                }
                // What the declined early start sent never counts.
                SendEffect::CancelData => self.sending = None,
                SendEffect::Done(outcome) => self.sent = Some(outcome),
                SendEffect::StopHashing => {}
                SendEffect::StopData => {
                    if let Some((phase, _)) = self.sending.take() {
                        self.sender.handle_data_ended(self.now, phase);
                    }
                }
                SendEffect::StartData { phase, ranges, .. } => {
                    self.sending = Some((phase, ranges));
                    self.data_ready();
                }
                job => self.events.push(Event::SenderJob(job)),
            }
        }
        while let Some(effect) = self.receiver.poll_effect() {
            match effect {
                RecvEffect::Send(msg) => {
                    let msg: ReceiverMsg = decode(&encode(&msg).unwrap()).unwrap();
                    self.messages += 1;
                    self.receiver_readies += matches!(msg, ReceiverMsg::Ready { .. }) as usize;
                    self.events.push(Event::ToSender(msg));
                }
                RecvEffect::Done(outcome) => self.received = Some(outcome),
                RecvEffect::DropEarly => self.dropped_early = true,
                RecvEffect::StopData => self.receiving = None,
                RecvEffect::StartData { phase, peer_ports, span, present, ends } => {
                    if phase == 0 || phase == RESTART_PHASE {
                        // Bytes outside `present` are not on disk yet.
                        let space = self.receiver_space();
                        let mut cleared = vec![0u8; space.len()];
                        for r in &present {
                            cleared[r.start as usize..r.end as usize]
                                .copy_from_slice(&space[r.start as usize..r.end as usize]);
                        }
                        self.set_receiver_space(&cleared);
                    }
                    let _ = present;
                    self.receiving = Some((phase, peer_ports, span, ends));
                    self.data_ready();
                }
                job => self.events.push(Event::ReceiverJob(job)),
            }
        }
    }

    fn data_ready(&mut self) {
        match (&self.sending, &self.receiving) {
            (Some((s, _)), Some((r, Some(_), _, _))) if s == r => self.events.push(Event::Data(*s)),
            (_, Some((r, None, _, _))) => self.events.push(Event::Data(*r)),
            _ => {}
        }
    }

    fn receiver_space(&self) -> Vec<u8> {
        self.dst.concat()
    }

    fn set_receiver_space(&mut self, space: &[u8]) {
        let mut at = 0;
        for file in &mut self.dst {
            let n = file.len();
            file.copy_from_slice(&space[at..at + n]);
            at += n;
        }
    }

    fn run(&mut self) {
        for step in 0..100_000 {
            self.collect();
            if self.sent.is_some() && self.received.is_some() && self.events.is_empty() {
                return;
            }
            if self.events.is_empty() {
                // Nothing can happen but a deadline.
                let next = [self.sender.poll_timeout(), self.receiver.poll_timeout()]
                    .into_iter()
                    .flatten()
                    .min();
                let Some(at) = next else {
                    panic!(
                        "stuck at step {step}: sent {:?}, received {:?}",
                        self.sent, self.received
                    )
                };
                self.now = self.now.max(at);
                self.sender.handle_timeout(self.now);
                self.receiver.handle_timeout(self.now);
                continue;
            }
            self.now += Duration::from_millis(1);
            let mut pick = self.rng.below(self.events.len());
            // A stream keeps its order: a message goes only after those sent before it.
            let first = |to_receiver: bool| {
                self.events.iter().position(|e| match e {
                    Event::ToReceiver(_) => to_receiver,
                    Event::ToSender(_) => !to_receiver,
                    _ => false,
                })
            };
            match self.events[pick] {
                Event::ToReceiver(_) => pick = first(true).unwrap_or(pick),
                Event::ToSender(_) => pick = first(false).unwrap_or(pick),
                _ => {}
            }
            let event = self.events.remove(pick);
            self.happen(event);
        }
        panic!("no end after 100,000 steps");
    }

    fn happen(&mut self, event: Event) {
        let now = self.now;
        match event {
            Event::ToReceiver(msg) => self.receiver.handle_message(now, msg),
            Event::ToSender(msg) => self.sender.handle_message(now, msg),
            Event::SenderJob(job) => match job {
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
                SendEffect::Bind { phase } => {
                    // The first phase's data starts from path memory; its `Ready` says so.
                    let note = (phase == self.sender.first_phase()).then_some(PATH_START);
                    self.sender.handle_bound_from(now, phase, vec![9, 9], note);
                }
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
                other => panic!("not a job: {other:?}"),
            },
            Event::ReceiverJob(job) => match job {
                RecvEffect::Plan(entries) => {
                    let count = entries.iter().filter(|e| e.kind == EntryKind::File).count();
                    let files: Vec<u32> = (0..count as u32)
                        .filter(|n| !self.setup.unwanted.contains(&(*n as usize)))
                        .collect();
                    self.dst =
                        files.iter().map(|&n| vec![0; self.setup.sizes[n as usize]]).collect();
                    let mut offers = Vec::new();
                    for (file, len, flips) in self.setup.prefill.clone() {
                        let k = files.iter().position(|&n| n as usize == file).unwrap();
                        let whole = len / BLOCK_BYTES as usize * BLOCK_BYTES as usize;
                        self.dst[k][..len].copy_from_slice(&self.src[file][..len]);
                        for at in flips {
                            self.dst[k][at] ^= 0x40;
                        }
                        offers.push((k as u32, blocks_of(&self.dst[k][..whole])));
                    }
                    let planned = Planned {
                        files,
                        replaced: 0,
                        kept: 0,
                        offers,
                        dry_run: self.setup.dry_run,
                    };
                    self.receiver.handle_planned(now, planned);
                }
                RecvEffect::Bind { phase } => self.receiver.handle_bound(now, phase, vec![7, 7]),
                RecvEffect::HashBlocks(files) => {
                    let hashed = files.iter().map(|&k| blocks_of(&self.dst[k as usize])).collect();
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
                other => panic!("not a job: {other:?}"),
            },
            Event::Data(phase) => self.move_data(phase),
            Event::SenderDataEnded(phase) => self.sender.handle_data_ended(self.now, phase),
        }
    }

    fn move_data(&mut self, phase: u32) {
        let Some((r_phase, ports, span, ends)) = self.receiving.take() else { return };
        assert_eq!(r_phase, phase);
        let mut space = self.receiver_space();
        if ports.is_some() {
            let Some((_, ranges)) = self.sending.take() else {
                panic!("no sender in phase {phase}")
            };
            let source = self.source_space();
            for r in &ranges {
                assert!(span.start <= r.start && r.end <= span.end, "{r:?} outside {span:?}");
                let (a, b) = (r.start as usize, r.end as usize);
                space[a..b].copy_from_slice(&source[a..b]);
                self.moved += r.end - r.start;
            }
            for &(p, at) in &self.setup.corrupt {
                if p == phase && span.contains(&at) {
                    space[at as usize] ^= 0x01;
                }
            }
            self.set_receiver_space(&space);
            self.events.push(Event::SenderDataEnded(phase));
        }
        if self.setup.receiver_fails {
            self.receiver.handle_failure(ErrorCode::Io, "the disk is full".into());
            return;
        }
        let mut hashes = Vec::new();
        let mut at = span.start as usize;
        for end in ends {
            hashes.push(blake3::hash(&space[at..end as usize]));
            at = end as usize;
        }
        self.receiver.handle_received(self.now, phase, hashes);
        self.receiver.handle_data_ended(self.now, phase);
    }
}

fn run(setup: &Setup, seeds: std::ops::RangeInclusive<u64>) -> Vec<World> {
    seeds
        .map(|seed| {
            eprintln!("seed {seed}");
            let mut world = World::new(seed, setup.clone());
            world.run();
            world
        })
        .collect()
}

/// What every run's sender says of its first phase's start ([`Sending::handle_bound_from`]).
const PATH_START: PathStart = PathStart { rate_bps: 900_000_000, age_s: 60 };

fn delivered(world: &World) {
    let sent = world.sent.clone().unwrap().expect("sent");
    let received = world.received.clone().unwrap().expect("received");
    assert_eq!(sent.digests, received.digests);
    for (k, &n) in world.wanted.iter().enumerate() {
        assert!(world.dst[k] == world.src[n as usize], "file {n} differs");
        assert_eq!(received.digests[k], blake3::hash(&world.src[n as usize]));
    }
    // The receiver heard the start from path memory whenever data moved.
    let expected = (world.moved > 0).then_some(PATH_START);
    assert_eq!(received.path_memory, expected, "moved {}", world.moved);
}

#[test]
fn files_move_whole_in_any_order_of_events() {
    let setup = Setup { sizes: vec![5 * MIB, 1000, 0, 3], ..Setup::default() };
    for world in run(&setup, 1..=20) {
        delivered(&world);
        assert_eq!(world.moved, (5 * MIB + 1003) as u64);
        assert_eq!(world.sent.unwrap().unwrap().repaired, 0);
    }
}

#[test]
fn unwanted_files_do_not_move() {
    let setup = Setup { sizes: vec![100, 200, 300], unwanted: vec![1], ..Setup::default() };
    for world in run(&setup, 1..=5) {
        assert_eq!(world.wanted, vec![0, 2]);
        delivered(&world);
        assert_eq!(world.moved, 400);
    }
}

#[test]
fn a_resumed_file_moves_only_what_is_missing() {
    let setup = Setup {
        sizes: vec![9 * MIB, 10],
        prefill: vec![(0, 8 * MIB + 5, vec![])],
        ..Setup::default()
    };
    for world in run(&setup, 1..=10) {
        delivered(&world);
        assert_eq!(world.moved, (MIB + 10) as u64);
        assert_eq!(world.received.unwrap().unwrap().resumed, 8 * MIB as u64);
    }
}

#[test]
fn a_resume_keeps_only_the_blocks_that_match() {
    // The second block on disk is not the sender's: the first stays, the rest moves.
    let setup = Setup {
        sizes: vec![9 * MIB],
        prefill: vec![(0, 8 * MIB, vec![5 * MIB])],
        ..Setup::default()
    };
    for world in run(&setup, 1..=10) {
        delivered(&world);
        assert_eq!(world.moved, 5 * MIB as u64);
    }
}

#[test]
fn a_corrupted_block_is_repaired() {
    let at = (4 * MIB + 77) as u64; // file 0, block 1
    let setup = Setup { sizes: vec![9 * MIB, 4], corrupt: vec![(0, at)], ..Setup::default() };
    for world in run(&setup, 1..=10) {
        delivered(&world);
        assert_eq!(world.sent.as_ref().unwrap().as_ref().unwrap().repaired, 1);
        assert_eq!(world.received.as_ref().unwrap().as_ref().unwrap().repaired, 1);
        assert_eq!(world.moved, (9 * MIB + 4 + 4 * MIB) as u64, "one block again");
    }
}

#[test]
fn a_fault_that_strikes_every_round_fails_as_integrity() {
    let at = 10;
    let setup =
        Setup { sizes: vec![MIB], corrupt: vec![(0, at), (1, at), (2, at)], ..Setup::default() };
    for world in run(&setup, 1..=5) {
        let received = world.received.unwrap().unwrap_err();
        assert!(
            matches!(received, Fault::Local { code: ErrorCode::Integrity, .. }),
            "{received:?}"
        );
        let sent = world.sent.unwrap().unwrap_err();
        assert!(matches!(sent, Fault::Peer { code: ErrorCode::Integrity, .. }), "{sent:?}");
        assert_eq!(world.moved, 3 * MIB as u64, "the first phase and two repair rounds");
    }
}

#[test]
fn a_dry_run_ends_with_the_choice() {
    let setup = Setup { sizes: vec![10, 20], dry_run: true, ..Setup::default() };
    for world in run(&setup, 1..=3) {
        assert!(world.sent.unwrap().unwrap().dry_run);
        assert!(world.received.unwrap().unwrap().dry_run);
        assert_eq!(world.moved, 0);
    }
}

#[test]
fn an_empty_manifest_is_verified_without_data() {
    let setup = Setup { sizes: vec![], ..Setup::default() };
    for world in run(&setup, 1..=3) {
        delivered(&world);
        assert_eq!(world.moved, 0);
    }
}

#[test]
fn a_receiver_that_fails_tells_the_sender() {
    let setup = Setup { sizes: vec![MIB], receiver_fails: true, ..Setup::default() };
    for world in run(&setup, 1..=5) {
        let sent = world.sent.unwrap().unwrap_err();
        assert_eq!(sent, Fault::Peer { code: ErrorCode::Io, message: "the disk is full".into() });
    }
}

#[test]
fn lost_digests_time_out_at_the_receiver() {
    let setup = Setup { sizes: vec![1000], lose_digests: true, ..Setup::default() };
    for world in run(&setup, 1..=3) {
        let received = world.received.unwrap().unwrap_err();
        let Fault::Timeout(why) = &received else { panic!("{received:?}") };
        assert!(why.contains("Digests"), "{why}");
        let sent = world.sent.unwrap().unwrap_err();
        assert!(matches!(sent, Fault::Peer { code: ErrorCode::Network, .. }), "{sent:?}");
    }
}

/// A `Want` of the manifest's first file alone.
fn want_first_file(early: bool) -> Want {
    Want { files: vec![[0, 1]], replaced: 0, kept: 0, resume: vec![], dry_run: false, early }
}

#[test]
fn verified_before_the_digests_is_a_protocol_error() {
    let now = Instant::now();
    let mut sender = Sending::new(now, &entries(&[10]), Timeouts::default());
    while sender.poll_effect().is_some() {}
    let want = want_first_file(false);
    sender.handle_message(now, ReceiverMsg::Want(want));
    sender.handle_message(now, ReceiverMsg::Ready { udp_ports: vec![1] });
    let effects: Vec<SendEffect> = std::iter::from_fn(|| sender.poll_effect()).collect();
    assert!(effects.contains(&SendEffect::Bind { phase: 0 }), "{effects:?}");
    sender.handle_bound(now, 0, vec![2]);
    // The answer comes before this end's hashes: the data stops, and Verified cannot stand.
    sender.handle_message(now, ReceiverMsg::Verified);
    sender.handle_data_ended(now, 0);
    let mut ended = None;
    while let Some(effect) = sender.poll_effect() {
        if let SendEffect::Done(outcome) = effect {
            ended = Some(outcome);
        }
    }
    assert!(matches!(ended, Some(Err(Fault::Protocol(_)))), "{ended:?}");
}

#[test]
fn a_peer_that_never_answers_is_a_timeout_with_its_deadline() {
    let now = Instant::now();
    let timeouts = Timeouts { reply: Duration::from_secs(7), ..Timeouts::default() };
    let mut receiver = Receiving::new(now, timeouts);
    assert_eq!(receiver.poll_timeout(), Some(now + Duration::from_secs(7)));
    receiver.handle_timeout(now + Duration::from_secs(6));
    assert!(!receiver.is_done());
    receiver.handle_timeout(now + Duration::from_secs(7));
    assert!(receiver.is_done());
    let effects: Vec<RecvEffect> = std::iter::from_fn(|| receiver.poll_effect()).collect();
    assert!(
        matches!(
            &effects[0],
            RecvEffect::Send(ReceiverMsg::Failed { code: ErrorCode::Network, .. })
        ),
        "{effects:?}"
    );
}

#[test]
fn an_early_start_is_taken_when_every_file_is_wanted_whole() {
    let setup = Setup { sizes: vec![5 * MIB, 1000, 0, 3], early: true, ..Setup::default() };
    for world in run(&setup, 1..=20) {
        delivered(&world);
        assert_eq!(world.moved, (5 * MIB + 1003) as u64, "every byte once");
        assert_eq!(world.receiver_readies, 0, "the sender had the ports beforehand");
        assert!(!world.dropped_early);
        assert_eq!((world.sender.first_phase(), world.receiver.first_phase()), (0, 0));
    }
}

#[test]
fn an_early_start_is_declined_when_a_file_is_not_wanted() {
    let setup =
        Setup { sizes: vec![100, 200, 300], unwanted: vec![1], early: true, ..Setup::default() };
    for world in run(&setup, 1..=10) {
        assert_eq!(world.wanted, vec![0, 2]);
        delivered(&world);
        assert_eq!(world.moved, 400, "only the restart's bytes count");
        assert!(world.dropped_early);
        assert_eq!(world.receiver_readies, 1, "the restart's sockets");
        let phases = (world.sender.first_phase(), world.receiver.first_phase());
        assert_eq!(phases, (RESTART_PHASE, RESTART_PHASE));
    }
}

#[test]
fn an_early_start_is_declined_for_a_resume() {
    let setup = Setup {
        sizes: vec![9 * MIB, 10],
        prefill: vec![(0, 8 * MIB + 5, vec![])],
        early: true,
        ..Setup::default()
    };
    for world in run(&setup, 1..=10) {
        delivered(&world);
        assert!(world.dropped_early);
        assert_eq!(world.moved, (MIB + 10) as u64);
        assert_eq!(world.received.unwrap().unwrap().resumed, 8 * MIB as u64);
    }
}

#[test]
fn an_early_start_is_declined_by_a_dry_run() {
    let setup = Setup { sizes: vec![10, 20], dry_run: true, early: true, ..Setup::default() };
    for world in run(&setup, 1..=5) {
        assert!(world.sent.unwrap().unwrap().dry_run);
        assert!(world.received.unwrap().unwrap().dry_run);
        assert!(world.dropped_early);
        assert_eq!(world.moved, 0);
    }
}

#[test]
fn early_and_restarted_transfers_repair_a_corrupted_block() {
    let at = (4 * MIB + 77) as u64; // file 0, block 1
    for (unwanted, phase) in [(vec![], 0), (vec![1], RESTART_PHASE)] {
        let setup = Setup {
            sizes: vec![9 * MIB, 4, 6],
            corrupt: vec![(phase, at)],
            unwanted,
            early: true,
            ..Setup::default()
        };
        for world in run(&setup, 1..=10) {
            delivered(&world);
            assert_eq!(world.sent.as_ref().unwrap().as_ref().unwrap().repaired, 1, "{phase}");
            assert_eq!(world.received.as_ref().unwrap().as_ref().unwrap().repaired, 1);
        }
    }
}

#[test]
fn an_early_start_of_nothing_is_verified_without_data() {
    for sizes in [vec![], vec![0, 0]] {
        let setup = Setup { sizes, early: true, ..Setup::default() };
        for world in run(&setup, 1..=5) {
            delivered(&world);
            assert_eq!(world.moved, 0);
            assert!(!world.dropped_early);
        }
    }
}

#[test]
fn an_early_want_that_takes_less_than_everything_is_a_protocol_error() {
    let now = Instant::now();
    let mut sender = Sending::new_early(now, &entries(&[10, 20]), Timeouts::default(), vec![1]);
    let effects: Vec<SendEffect> = std::iter::from_fn(|| sender.poll_effect()).collect();
    assert!(effects.contains(&SendEffect::Bind { phase: 0 }), "{effects:?}");
    sender.handle_bound(now, 0, vec![2]);
    let effects: Vec<SendEffect> = std::iter::from_fn(|| sender.poll_effect()).collect();
    let started = effects.iter().any(|e| matches!(e, SendEffect::StartData { phase: 0, .. }));
    assert!(started, "the data starts before Want: {effects:?}");
    let want = want_first_file(true);
    sender.handle_message(now, ReceiverMsg::Want(want));
    let ended = std::iter::from_fn(|| sender.poll_effect()).find_map(|e| match e {
        SendEffect::Done(outcome) => Some(outcome),
        _ => None,
    });
    assert!(matches!(ended, Some(Err(Fault::Protocol(_)))), "{ended:?}");
}

#[test]
fn an_early_start_without_its_sockets_is_declined() {
    let setup = Setup {
        sizes: vec![3 * MIB, 7],
        early: true,
        early_sockets_gone: true,
        ..Setup::default()
    };
    for world in run(&setup, 1..=5) {
        delivered(&world);
        assert!(world.dropped_early);
        assert_eq!(world.moved, (3 * MIB + 7) as u64);
        assert_eq!(world.sender.first_phase(), RESTART_PHASE);
    }
}
