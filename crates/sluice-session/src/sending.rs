//! The sending role: the end that holds the files.
//!
//! It announces the manifest, learns which files the receiver wants, judges the receiver's
//! resume offers, opens the data channels after the receiver's, hashes what it announced
//! beside the data and sends the `Digests`, answers repair rounds, and ends with the
//! receiver's `Verified` or a failure.
//!
//! ```text
//!  Sending                                   Receiving
//!    Manifest ... (last) ------------------->
//!    <--------------------- Want {files, resume?, dry_run?}   (a dry run ends here)
//!    <--------------------- Ready {ports}    (when any wanted file has bytes)
//!    Resumed {kept} ------------------------>  (when Want offered any)
//!    Ready {ports}, data ===================>  (when any byte is left to move)
//!    Digests ... --------------------------->  (when this end's hashing is done)
//!    <--------------------- Verified | Failed
//!    <--------------------- Repair {files}, Ready {ports}    (repair round r)
//!    Repairing {blocks} -------------------->
//!    Ready {ports}, blocks =================>  (when any block differs)
//!    <--------------------- Verified | Failed | Repair ...
//! ```
//!
//! An **early start** ([`Sending::new_early`]) saves the round trip of `Want`: when the
//! receiver's data sockets are bound before the transfer begins and the sender knows their
//! ports (a server offers them before the client's first request; a client downloading to a
//! path that holds nothing names them in its `Get`), the sender assumes every file is wanted
//! with nothing to resume and starts the data right behind its manifest:
//!
//! ```text
//!    Manifest ..., Ready {ports}, data ====>  (phase 0, to the ports given beforehand)
//!    <--------------------- Want {all files, early}  (the receiver takes it; no Ready)
//!    Digests ... --------------------------->  (held until this Want: they name its files)
//!    <--------------------- Want {files, resume?, dry_run?}, Ready {ports}  (or: declined)
//!    (phase 0 stops at once; the transfer goes on as above, on [`RESTART_PHASE`])
//! ```

use std::collections::VecDeque;
use std::ops::Range;
use std::time::Duration;

use crate::layout::{Layout, bytes_in};
use crate::manifest::{Entry, EntryKind, from_ranges};
use crate::messages::{BlockHashes, ErrorCode, PathStart, ReceiverMsg, SenderMsg};
use crate::time::Instant;
use crate::transfer::{
    DIGESTS_PER_MESSAGE, Deadline, Fault, MAX_REPAIR_ROUNDS, RESTART_PHASE, Timeouts, hex,
    manifest_parts, parse_hashes,
};

/// What the driver of a [`Sending`] does next ([`Sending::poll_effect`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendEffect {
    /// Send this message to the receiver.
    Send(SenderMsg),
    /// The receiver chose these files (numbers among the manifest's files, in order): the
    /// data's offset space is them end to end. A dry run ends here.
    Wanted {
        /// The wanted files.
        files: Vec<u32>,
        /// Existing files the receiver will replace.
        replaced: u64,
        /// Existing files the receiver keeps by its overwrite policy.
        kept: u64,
        /// Whether this is all the receiver wanted to know.
        dry_run: bool,
    },
    /// Hash the leading blocks of these wanted files (index among the wanted files, the
    /// receiver's block hashes) and answer [`Sending::handle_resume_checked`] with the
    /// matching leading bytes of each.
    CheckResume(Vec<(u32, Vec<blake3::Hash>)>),
    /// Bind this end's data sockets for `phase` (0, then the repair round) and answer
    /// [`Sending::handle_bound`] with their ports.
    Bind {
        /// The phase.
        phase: u32,
    },
    /// Start sending `ranges` of the offset space on `phase`'s channels to the receiver's
    /// `peer_ports`; answer [`Sending::handle_data_ended`] when they end. A running phase
    /// ends first.
    StartData {
        /// The phase.
        phase: u32,
        /// The receiver's ports.
        peer_ports: Vec<u16>,
        /// What to send.
        ranges: Vec<Range<u64>>,
    },
    /// Hash each wanted file whole and answer [`Sending::handle_hashed`].
    HashFiles,
    /// The receiver answered while the data still runs: give the channels a short grace to
    /// see their last acknowledgement, then stop them (and answer
    /// [`Sending::handle_data_ended`]).
    StopData,
    /// Stop hashing: the hashes are no longer needed.
    StopHashing,
    /// Hash every block of these wanted files and answer [`Sending::handle_blocks_hashed`].
    HashBlocks(Vec<u32>),
    /// An early start ([`Sending::new_early`]): the data starts before the receiver's choice,
    /// on the assumption that it wants all these files (every file of the manifest): lay them
    /// end to end for the data. [`SendEffect::Wanted`] follows with the receiver's real choice.
    Early {
        /// The files assumed wanted.
        files: Vec<u32>,
    },
    /// The receiver declined the early start: stop the data channels now, without waiting
    /// for their acknowledgements (nothing they sent counts), and do not report their end.
    CancelData,
    /// The transfer ended.
    Done(Result<Sent, Fault>),
}

/// A transfer the receiver has verified (or a dry run it ended).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The wanted files' BLAKE3, in order (empty after a dry run).
    pub digests: Vec<blake3::Hash>,
    /// Blocks sent again in repair rounds.
    pub repaired: u64,
    /// Bytes that moved in the first phase (the rest was at the receiver already).
    pub moved: u64,
    /// Whether the receiver asked for a dry run.
    pub dry_run: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The manifest is out; the receiver's choice is awaited.
    AwaitWant,
    /// The driver reads the offered blocks.
    CheckingResume,
    /// The receiver's `Ready` of this phase is awaited.
    AwaitPeerReady(u32),
    /// The driver binds this phase's sockets.
    Binding(u32),
    /// Data and hashing run; the first message is the receiver's answer.
    Moving,
    /// The driver hashes the blocks the receiver asked about.
    HashingBlocks,
    /// The answer is awaited after the data and the hashes.
    AwaitReply,
    Done,
}

/// The sending role of one transfer, with no I/O: feed it what happens (`handle_*`), do what
/// it asks ([`Sending::poll_effect`]) and call [`Sending::handle_timeout`] at
/// [`Sending::poll_timeout`].
///
/// To drive it: make it with the manifest ([`Sending::new`]), then loop: take every effect
/// (send messages in order; run file work on a thread and report its result; start and stop
/// data channels), then wait for the first of a message from the receiver, a finished job or
/// the deadline, and hand that in. It ends with [`SendEffect::Done`]; after that it ignores
/// everything.
#[derive(Debug)]
pub struct Sending {
    timeouts: Timeouts,
    /// Sizes of the manifest's files, in order.
    manifest_sizes: Vec<u64>,
    state: State,
    /// The wanted files.
    layout: Layout,
    /// The receiver's offers: (wanted file, blocks).
    offered: Vec<(u32, Vec<blake3::Hash>)>,
    /// What the first phase sends.
    ranges: Vec<Range<u64>>,
    /// What the current repair round sends, and its blocks.
    repair: (Vec<Range<u64>>, Vec<[u64; 2]>),
    /// The receiver's offers of the current repair round, in order.
    repair_offers: Vec<BlockHashes>,
    data_running: bool,
    hashing_running: bool,
    digests: Option<Vec<blake3::Hash>>,
    /// The receiver's answer, once it came.
    reply: Option<ReceiverMsg>,
    /// The phase of the data channels last started (0, or the repair round).
    phase: u32,
    /// Repair rounds begun.
    round: u32,
    /// The data start waiting for this end's sockets.
    pending_start: Option<SendEffect>,
    /// The phase of the transfer's first data: 0, or [`RESTART_PHASE`] after a declined early
    /// start.
    first_phase: u32,
    /// The data started early and the receiver's `Want` has not come yet.
    unconfirmed: bool,
    repaired: u64,
    inbox: VecDeque<ReceiverMsg>,
    effects: VecDeque<SendEffect>,
    /// The current wait.
    deadline: Deadline,
}

impl Sending {
    /// A transfer of `entries` (the manifest, as the receiver will see it): its `Manifest`
    /// parts are the first effects.
    pub fn new(now: Instant, entries: &[Entry], timeouts: Timeouts) -> Sending {
        let manifest_sizes =
            entries.iter().filter(|e| e.kind == EntryKind::File).map(|e| e.size).collect();
        let effects = manifest_parts(entries)
            .into_iter()
            .map(|part| SendEffect::Send(SenderMsg::Manifest(part)))
            .collect();
        let mut sending = Sending {
            timeouts,
            manifest_sizes,
            state: State::AwaitWant,
            layout: Layout::default(),
            offered: Vec::new(),
            ranges: Vec::new(),
            repair: (Vec::new(), Vec::new()),
            repair_offers: Vec::new(),
            data_running: false,
            hashing_running: false,
            digests: None,
            reply: None,
            phase: 0,
            round: 0,
            pending_start: None,
            first_phase: 0,
            unconfirmed: false,
            repaired: 0,
            inbox: VecDeque::new(),
            effects,
            deadline: Deadline::default(),
        };
        sending.wait(now, "the receiver's choice of files (Want)", timeouts.reply);
        sending
    }

    /// A transfer of `entries` whose data starts at once, before the receiver's choice, to the
    /// receiver's data sockets at `peer_ports` (bound before the transfer began): its effects
    /// are the `Manifest` parts, [`SendEffect::Early`] with every file, and (when any file has
    /// bytes) `Bind` and `StartData` of phase 0. The receiver's `Want` then takes that data
    /// (`early`) or declines it; see the module's diagram.
    pub fn new_early(
        now: Instant,
        entries: &[Entry],
        timeouts: Timeouts,
        peer_ports: Vec<u16>,
    ) -> Sending {
        let mut sending = Sending::new(now, entries, timeouts);
        let files = (0..sending.manifest_sizes.len() as u32).collect();
        sending.layout = Layout::new(sending.manifest_sizes.iter().copied());
        sending.ranges = sending.layout.remaining(&[]);
        sending.unconfirmed = true;
        sending.effects.push_back(SendEffect::Early { files });
        if sending.layout.total() > 0 {
            sending.state = State::Binding(0);
            sending.effects.push_back(SendEffect::Bind { phase: 0 });
            let ranges = sending.ranges.clone();
            sending.pending_start = Some(SendEffect::StartData { phase: 0, peer_ports, ranges });
        } else {
            sending.state = State::Moving;
            sending.start_hashing();
        }
        sending
    }

    /// The phase of the transfer's first data: 0, or [`RESTART_PHASE`] once the receiver
    /// declined an early start (repair rounds are phases 1 and up).
    pub fn first_phase(&self) -> u32 {
        self.first_phase
    }

    /// Whether the data started before the receiver's `Want` and that `Want` has not come:
    /// phase 0's channels may hear nothing back for as long as the receiver takes to plan.
    pub fn is_unconfirmed(&self) -> bool {
        self.unconfirmed
    }

    /// The next thing to do, in order.
    pub fn poll_effect(&mut self) -> Option<SendEffect> {
        self.effects.pop_front()
    }

    /// When [`Sending::handle_timeout`] is due, if a wait has a deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline.at()
    }

    /// Whether the transfer has ended ([`SendEffect::Done`] was issued).
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The wanted files, laid end to end (empty before `Want`).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// A message from the receiver.
    pub fn handle_message(&mut self, now: Instant, msg: ReceiverMsg) {
        if self.state == State::Done {
            return;
        }
        if let ReceiverMsg::Failed { code, message } = msg {
            return self.end(Err(Fault::Peer { code, message }));
        }
        self.inbox.push_back(msg);
        self.pump(now);
    }

    /// The receiver ended its side of the stream: nothing more will come from it. Fine once
    /// its answer is here; before that, a protocol error.
    pub fn handle_peer_finished(&mut self, now: Instant) {
        let _ = now;
        if self.state != State::Done && self.reply.is_none() && self.inbox.is_empty() {
            self.protocol("the receiver ended the stream without an answer".into());
        }
    }

    /// The leading bytes of each offered file that match the receiver's blocks, in the order
    /// of [`SendEffect::CheckResume`].
    pub fn handle_resume_checked(&mut self, now: Instant, kept: Vec<u64>) {
        if self.state != State::CheckingResume {
            return;
        }
        if kept.len() != self.offered.len() {
            return self.end(Err(Fault::Local {
                code: ErrorCode::Io,
                message: format!("{} verdicts for {} offers", kept.len(), self.offered.len()),
            }));
        }
        let mut per_file = vec![0; self.layout.len()];
        let mut verdict = Vec::new();
        for ((file, _), bytes) in self.offered.iter().zip(kept) {
            let size = self.layout.file(*file as usize).map_or(0, |(size, _)| size);
            per_file[*file as usize] = bytes.min(size);
            verdict.push([u64::from(*file), bytes.min(size)]);
        }
        self.ranges = self.layout.remaining(&per_file);
        self.send(SenderMsg::Resumed { kept: verdict });
        self.after_verdict(now);
    }

    /// This end's data sockets of `phase` are bound, at these ports.
    pub fn handle_bound(&mut self, now: Instant, phase: u32, ports: Vec<u16>) {
        self.handle_bound_from(now, phase, ports, None);
    }

    /// [`Sending::handle_bound`], for data that starts from path memory (`Ready` tells the
    /// receiver).
    pub fn handle_bound_from(
        &mut self,
        now: Instant,
        phase: u32,
        ports: Vec<u16>,
        path_memory: Option<PathStart>,
    ) {
        if self.state != State::Binding(phase) {
            return;
        }
        self.send(SenderMsg::Ready { udp_ports: ports, path_memory });
        self.effects.extend(self.pending_start.take());
        if !self.unconfirmed {
            // An early start still waits for the receiver's choice (`new` set that wait).
            self.deadline.clear();
        }
        self.state = State::Moving;
        self.data_running = true;
        self.phase = phase;
        if phase == self.first_phase {
            self.start_hashing();
        }
        self.pump(now);
    }

    /// `phase`'s data channels ended (all sent and acknowledged, or stopped).
    pub fn handle_data_ended(&mut self, now: Instant, phase: u32) {
        if phase == self.phase && self.data_running {
            self.data_running = false;
            self.settle(now);
        }
    }

    /// The wanted files' BLAKE3, in order.
    pub fn handle_hashed(&mut self, now: Instant, hashes: Vec<blake3::Hash>) {
        if !self.hashing_running || self.state == State::Done {
            return;
        }
        self.hashing_running = false;
        if hashes.len() != self.layout.len() {
            return self.end(Err(Fault::Local {
                code: ErrorCode::Io,
                message: format!("{} hashes for {} files", hashes.len(), self.layout.len()),
            }));
        }
        self.digests = Some(hashes);
        // Before the receiver's choice they name files it may not want: they wait for it.
        if !self.unconfirmed {
            self.send_digests();
        }
        self.settle(now);
    }

    fn send_digests(&mut self) {
        let batches: Vec<SenderMsg> = self
            .digests
            .iter()
            .flat_map(|hashes| hashes.chunks(DIGESTS_PER_MESSAGE))
            .map(|batch| SenderMsg::Digests { blake3: hex(batch) })
            .collect();
        for msg in batches {
            self.send(msg);
        }
    }

    /// Every block's BLAKE3 of each file of [`SendEffect::HashBlocks`], in its order.
    pub fn handle_blocks_hashed(&mut self, now: Instant, hashed: Vec<Vec<blake3::Hash>>) {
        if self.state != State::HashingBlocks {
            return;
        }
        let offers = std::mem::take(&mut self.repair_offers);
        let mut differ = Vec::new();
        for (offer, mine) in offers.iter().zip(&hashed) {
            let Ok(theirs) = parse_hashes(&offer.blocks, "Repair") else { continue };
            // `blake3::Hash` compares in constant time.
            let differing = mine.iter().zip(&theirs).enumerate().filter(|(_, (a, b))| a != b);
            differ.extend(differing.map(|(block, _)| [u64::from(offer.file), block as u64]));
        }
        if hashed.len() != offers.len()
            || hashed.iter().zip(&offers).any(|(h, o)| h.len() != o.blocks.len())
        {
            return self.end(Err(Fault::Local {
                code: ErrorCode::Io,
                message: "the blocks hashed are not those the receiver named".into(),
            }));
        }
        differ.sort_unstable();
        let ranges = match self.layout.block_ranges(&differ, None) {
            Ok(ranges) => ranges,
            Err(e) => return self.end(Err(Fault::Local { code: ErrorCode::Io, message: e })),
        };
        self.send(SenderMsg::Repairing { blocks: differ.clone() });
        self.repair = (ranges, differ);
        self.await_peer_ready(now, self.round);
    }

    /// This end failed (a data channel, a file read): the receiver is told, and the transfer
    /// ends with [`Fault::Local`].
    pub fn handle_failure(&mut self, code: ErrorCode, message: String) {
        self.end(Err(Fault::Local { code, message }));
    }

    /// The deadline of [`Sending::poll_timeout`] passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(fault) = self.deadline.passed(now) {
            self.end(Err(fault));
        }
    }

    fn wait(&mut self, now: Instant, what: &'static str, wait: Duration) {
        self.deadline.set(now, what, wait);
    }

    fn send(&mut self, msg: SenderMsg) {
        self.effects.push_back(SendEffect::Send(msg));
    }

    fn end(&mut self, outcome: Result<Sent, Fault>) {
        if self.state == State::Done {
            return;
        }
        if let Err(fault) = &outcome {
            if let Some((code, message)) = fault.to_send() {
                self.send(SenderMsg::Failed { code, message });
            }
            if self.data_running {
                self.effects.push_back(SendEffect::StopData);
            }
            if self.hashing_running {
                self.effects.push_back(SendEffect::StopHashing);
            }
        }
        self.state = State::Done;
        self.deadline.clear();
        self.effects.push_back(SendEffect::Done(outcome));
    }

    fn protocol(&mut self, why: String) {
        self.end(Err(Fault::Protocol(why)));
    }

    /// Whether the current state reads the receiver's messages.
    fn listening(&self) -> bool {
        match self.state {
            State::AwaitWant | State::AwaitPeerReady(_) | State::AwaitReply => true,
            // Once the answer came, what follows it waits until the answer is taken.
            State::Moving => self.reply.is_none(),
            _ => false,
        }
    }

    fn pump(&mut self, now: Instant) {
        while self.listening()
            && let Some(msg) = self.inbox.pop_front()
        {
            match self.state {
                State::AwaitWant => self.on_want(now, msg),
                State::Moving if self.unconfirmed => self.on_early_want(now, msg),
                State::AwaitPeerReady(phase) => match msg {
                    ReceiverMsg::Ready { udp_ports } => self.on_peer_ready(now, phase, udp_ports),
                    other => self.protocol(format!("expected the receiver's Ready, got {other:?}")),
                },
                State::Moving => {
                    // The receiver answered before this end finished: it has every byte (or
                    // gave up). The channels get a grace for their report, hashing stops.
                    self.reply = Some(msg);
                    if self.data_running {
                        self.effects.push_back(SendEffect::StopData);
                    }
                    if self.hashing_running {
                        self.hashing_running = false;
                        self.effects.push_back(SendEffect::StopHashing);
                    }
                    self.settle(now);
                }
                State::AwaitReply => self.on_reply(msg),
                _ => unreachable!("not listening"),
            }
        }
    }

    fn on_want(&mut self, now: Instant, msg: ReceiverMsg) {
        let want = match msg {
            ReceiverMsg::Want(want) => want,
            other => return self.protocol(format!("expected Want, got {other:?}")),
        };
        let files = match from_ranges(&want.files, self.manifest_sizes.len()) {
            Ok(files) => files,
            Err(e) => return self.protocol(e),
        };
        self.layout = Layout::new(files.iter().map(|&n| self.manifest_sizes[n as usize]));
        let (replaced, kept, dry_run) = (want.replaced, want.kept, want.dry_run);
        self.effects.push_back(SendEffect::Wanted { files, replaced, kept, dry_run });
        if want.dry_run {
            return self.end(Ok(Sent {
                digests: Vec::new(),
                repaired: 0,
                moved: 0,
                dry_run: true,
            }));
        }
        let mut offered = Vec::new();
        for offer in want.resume {
            let k = offer.file as usize;
            if k >= self.layout.len() || offered.iter().any(|(f, _)| *f == offer.file) {
                return self
                    .protocol(format!("a resume offer for file {k} of {}", self.layout.len()));
            }
            if offer.blocks.len() as u64 > self.layout.blocks(k) {
                return self.protocol(format!("a resume offer of more blocks than file {k} has"));
            }
            match parse_hashes(&offer.blocks, "a resume offer") {
                Ok(hashes) => offered.push((offer.file, hashes)),
                Err(e) => return self.protocol(e),
            }
        }
        self.deadline.clear();
        if offered.is_empty() {
            self.ranges = self.layout.remaining(&[]);
            self.after_verdict(now);
        } else {
            self.offered = offered.clone();
            self.state = State::CheckingResume;
            self.effects.push_back(SendEffect::CheckResume(offered));
        }
    }

    /// The receiver's `Want` after an early start: it takes the data that runs, or declines
    /// it (then that data stops and the transfer goes on as if it had not started).
    fn on_early_want(&mut self, now: Instant, msg: ReceiverMsg) {
        let want = match msg {
            ReceiverMsg::Want(want) => want,
            other => return self.protocol(format!("expected Want, got {other:?}")),
        };
        self.unconfirmed = false;
        if !want.early {
            if self.data_running {
                self.data_running = false;
                self.effects.push_back(SendEffect::CancelData);
            }
            if self.hashing_running {
                self.hashing_running = false;
                self.effects.push_back(SendEffect::StopHashing);
            }
            self.digests = None;
            self.first_phase = RESTART_PHASE;
            self.state = State::AwaitWant;
            return self.on_want(now, ReceiverMsg::Want(want));
        }
        let count = self.manifest_sizes.len() as u32;
        let every = from_ranges(&want.files, count as usize).is_ok_and(|f| f.len() as u32 == count);
        if !every || !want.resume.is_empty() || want.dry_run {
            return self.protocol(
                "an early Want must take every file, with nothing to resume and no dry run".into(),
            );
        }
        self.deadline.clear();
        self.effects.push_back(SendEffect::Wanted {
            files: (0..count).collect(),
            replaced: want.replaced,
            kept: want.kept,
            dry_run: false,
        });
        if self.digests.is_some() {
            self.send_digests();
        }
        self.settle(now);
    }

    /// The ranges to send are known: the data starts once the receiver's ports are here.
    fn after_verdict(&mut self, now: Instant) {
        if self.layout.total() > 0 {
            // The receiver's Ready comes right behind Want whenever a wanted file has bytes.
            self.await_peer_ready(now, self.first_phase);
        } else {
            self.state = State::Moving;
            self.start_hashing();
            self.settle(now);
        }
    }

    fn await_peer_ready(&mut self, now: Instant, phase: u32) {
        self.state = State::AwaitPeerReady(phase);
        self.wait(now, "the receiver's Ready", self.timeouts.reply);
        self.pump(now);
    }

    fn on_peer_ready(&mut self, now: Instant, phase: u32, peer_ports: Vec<u16>) {
        self.deadline.clear();
        let first = phase == self.first_phase;
        let ranges = if first { self.ranges.clone() } else { self.repair.0.clone() };
        self.phase = phase;
        if ranges.is_empty() {
            // Nothing to move after all (every byte resumed, or no block differs).
            self.state = State::Moving;
            if first {
                self.start_hashing();
            }
            return self.settle(now);
        }
        if !first {
            self.repaired += self.repair.1.len() as u64;
        }
        self.state = State::Binding(phase);
        self.effects.push_back(SendEffect::Bind { phase });
        // The data starts once the sockets are bound and their Ready is sent.
        self.pending_start = Some(SendEffect::StartData { phase, peer_ports, ranges });
    }

    fn start_hashing(&mut self) {
        if self.layout.is_empty() {
            self.digests = Some(Vec::new());
        } else {
            self.hashing_running = true;
            self.effects.push_back(SendEffect::HashFiles);
        }
    }

    /// In `Moving`: once the data and the hashing are done, the answer is awaited (or, if it
    /// came already, taken).
    fn settle(&mut self, now: Instant) {
        // An early start's channels may see their last acknowledgement before the receiver's
        // `Want` arrives: the answer is awaited only after that `Want`.
        if self.state != State::Moving
            || self.data_running
            || self.hashing_running
            || self.unconfirmed
        {
            return;
        }
        // The receiver hashes what it wrote before it answers, and may wait as long for the
        // digests: a reply's time more, so a receiver that gives up can say so first.
        let hashed = if self.round == 0 { self.layout.total() } else { bytes_in(&self.repair.0) };
        let wait = self.timeouts.hash_budget(hashed) + self.timeouts.reply;
        self.state = State::AwaitReply;
        self.wait(now, "the receiver's answer", wait);
        if let Some(reply) = self.reply.take() {
            self.on_reply(reply);
        }
        self.pump(now);
    }

    fn on_reply(&mut self, msg: ReceiverMsg) {
        match msg {
            ReceiverMsg::Verified => match self.digests.take() {
                Some(digests) => self.end(Ok(Sent {
                    digests,
                    repaired: self.repaired,
                    moved: bytes_in(&self.ranges),
                    dry_run: false,
                })),
                None => self.protocol("Verified before the digests were sent".into()),
            },
            ReceiverMsg::Repair { files } => self.on_repair(files),
            other => self.protocol(format!("expected Verified or Repair, got {other:?}")),
        }
    }

    fn on_repair(&mut self, files: Vec<BlockHashes>) {
        if self.digests.is_none() {
            return self.protocol("Repair before the digests were sent".into());
        }
        let round = self.round + 1;
        if round > MAX_REPAIR_ROUNDS {
            return self.protocol(format!("a repair round beyond the {MAX_REPAIR_ROUNDS} allowed"));
        }
        let mut seen = Vec::new();
        for offer in &files {
            let k = offer.file as usize;
            if k >= self.layout.len() {
                return self.protocol(format!("Repair names file {k} of {}", self.layout.len()));
            }
            if seen.contains(&k) || offer.blocks.len() as u64 != self.layout.blocks(k) {
                return self.protocol(format!(
                    "Repair for file {k}: {} block hashes for {} blocks, or the file twice",
                    offer.blocks.len(),
                    self.layout.blocks(k)
                ));
            }
            if let Err(e) = parse_hashes(&offer.blocks, "Repair") {
                return self.protocol(e);
            }
            seen.push(k);
        }
        self.round = round;
        self.deadline.clear();
        self.state = State::HashingBlocks;
        self.effects.push_back(SendEffect::HashBlocks(files.iter().map(|o| o.file).collect()));
        self.repair_offers = files;
    }
}

/// How long a sending end may wait for the channels' last acknowledgement once the receiver
/// answered, before it stops them ([`SendEffect::StopData`]).
pub const SENDER_GRACE: Duration = Duration::from_secs(2);
