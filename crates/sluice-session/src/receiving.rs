//! The receiving role: the end that writes the files.
//!
//! It takes the manifest, plans where each entry goes (its driver does, on disk), answers with
//! the files it wants and its resume offers, binds its data sockets first, takes the data and
//! the sender's `Digests`, compares, asks for the blocks of files that did not match (at most
//! [`MAX_REPAIR_ROUNDS`] rounds), and ends by storing the files and saying `Verified`, or
//! `Failed`. The flow is drawn in [`crate::sending`].
//!
//! After an early start ([`Receiving::new_early`]: this end's phase-0 sockets were bound before
//! the transfer began, and the sender knows their ports and may be sending already), it takes
//! that data when its plan wants every file with nothing to resume (`Want` with `early`), and
//! else declines it: the sockets are dropped, and the transfer goes on on
//! [`RESTART_PHASE`] as if it had not started.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::Duration;

use crate::layout::{Layout, bytes_in, complement};
use crate::manifest::{Entry, EntryKind, to_ranges};
use crate::messages::{BlockHashes, ErrorCode, PathStart, ReceiverMsg, SenderMsg, Want};
use crate::time::Instant;
use crate::transfer::{
    Deadline, Fault, MAX_REPAIR_ROUNDS, ManifestAssembler, RESTART_PHASE, Timeouts, hex,
    parse_hashes,
};

/// What the driver of a [`Receiving`] does next ([`Receiving::poll_effect`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecvEffect {
    /// Send this message to the sender.
    Send(ReceiverMsg),
    /// The whole manifest came: plan it at the destination and answer
    /// [`Receiving::handle_planned`] (or [`Receiving::handle_failure`]).
    Plan(Vec<Entry>),
    /// Bind this end's data sockets for `phase` (0, then the repair round) and answer
    /// [`Receiving::handle_bound`] with their ports.
    Bind {
        /// The phase.
        phase: u32,
    },
    /// Receive `span` of the offset space on `phase`'s channels from the sender's
    /// `peer_ports` (`None`: nothing moves; the bytes in `present` are only hashed), hashing
    /// each file as it is written; answer [`Receiving::handle_received`] with the hashes of
    /// the files ending at `ends` once every byte is there. A running phase ends first.
    StartData {
        /// The phase.
        phase: u32,
        /// The sender's ports, when any byte moves.
        peer_ports: Option<Vec<u16>>,
        /// The part of the offset space this phase covers.
        span: Range<u64>,
        /// What is in it already.
        present: Vec<Range<u64>>,
        /// Where the files of the span end.
        ends: Vec<u64>,
    },
    /// Stop the data channels: the transfer failed.
    StopData,
    /// This end declined an early start: close the phase-0 sockets bound before the transfer
    /// began (what arrived on them is dropped unread).
    DropEarly,
    /// Hash every block of these wanted files and answer [`Receiving::handle_blocks_hashed`].
    HashBlocks(Vec<u32>),
    /// Store the files whose `actual` hash is the sender's `expected` and answer
    /// [`Receiving::handle_committed`].
    Commit {
        /// The sender's hashes, one per wanted file.
        expected: Vec<blake3::Hash>,
        /// The hashes of what this end wrote.
        actual: Vec<blake3::Hash>,
    },
    /// The transfer ended.
    Done(Result<Received, Fault>),
}

/// What the receiver's driver planned for a manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Planned {
    /// The numbers of the manifest's files that move, increasing.
    pub files: Vec<u32>,
    /// Existing files that will be replaced.
    pub replaced: u64,
    /// Existing files kept by the overwrite policy.
    pub kept: u64,
    /// Files an interrupted transfer left: (index among the wanted files, BLAKE3 of each
    /// block of its leading bytes on disk).
    pub offers: Vec<(u32, Vec<blake3::Hash>)>,
    /// Say what would move, and stop.
    pub dry_run: bool,
}

/// A transfer that ended with the files stored (or a dry run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The sender's hashes, one per wanted file.
    pub digests: Vec<blake3::Hash>,
    /// Blocks received again in repair rounds.
    pub repaired: u64,
    /// Bytes that were at this end already and did not move.
    pub resumed: u64,
    /// Whether it was a dry run.
    pub dry_run: bool,
    /// The sender started the data from path memory (its `Ready` said).
    pub path_memory: Option<PathStart>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    AwaitManifest,
    Planning,
    Binding(u32),
    AwaitResumed,
    AwaitPeerReady(u32),
    /// The data of this phase arrives; the sender's `Digests` may come meanwhile.
    Receiving(u32),
    AwaitDigests,
    HashingBlocks,
    AwaitRepairing,
    Committing,
    Done,
}

/// The receiving role of one transfer, with no I/O: feed it what happens (`handle_*`), do what
/// it asks ([`Receiving::poll_effect`]) and call [`Receiving::handle_timeout`] at
/// [`Receiving::poll_timeout`].
///
/// To drive it: make it ([`Receiving::new`]) when the transfer's stream opens, hand it the
/// sender's messages, and loop as for [`crate::Sending`]: take every effect (send messages in
/// order; plan, hash and commit on a thread and report the result; start data channels), then
/// wait for the first of a message, a finished job or the deadline. It ends with
/// [`RecvEffect::Done`]; after that it ignores everything.
#[derive(Debug)]
pub struct Receiving {
    timeouts: Timeouts,
    state: State,
    manifest: ManifestAssembler,
    /// Sizes of the manifest's files.
    manifest_sizes: Vec<u64>,
    layout: Layout,
    /// (wanted file, blocks offered).
    offered: Vec<(u32, usize)>,
    present: Vec<Range<u64>>,
    /// The sender's digests so far.
    digests: Vec<blake3::Hash>,
    /// The hashes of what is written, once phase 0's data is all here.
    actual: Option<Vec<blake3::Hash>>,
    /// The repair round's files (wanted index) and ranges.
    bad: Vec<usize>,
    repair_ranges: Vec<Range<u64>>,
    round: u32,
    repaired: u64,
    data_running: bool,
    /// The data start waiting for this end's sockets or the sender's `Ready`.
    peer_ports: Option<Vec<u16>>,
    /// The sender starts early ([`Receiving::new_early`]); and whether this end's phase-0
    /// sockets, bound before the transfer began, can take that data.
    early: Option<bool>,
    /// The phase of the transfer's first data: 0, or [`RESTART_PHASE`] after a declined early
    /// start.
    first_phase: u32,
    /// A declined early start's `Ready` from the sender is still to come, and is dropped.
    skip_ready: bool,
    /// What the sender's first `Ready` said of path memory.
    path_memory: Option<PathStart>,
    inbox: VecDeque<SenderMsg>,
    effects: VecDeque<RecvEffect>,
    /// The current wait.
    deadline: Deadline,
}

impl Receiving {
    /// A transfer whose manifest is about to come.
    pub fn new(now: Instant, timeouts: Timeouts) -> Receiving {
        let mut receiving = Receiving {
            timeouts,
            state: State::AwaitManifest,
            manifest: ManifestAssembler::default(),
            manifest_sizes: Vec::new(),
            layout: Layout::default(),
            offered: Vec::new(),
            present: Vec::new(),
            digests: Vec::new(),
            actual: None,
            bad: Vec::new(),
            repair_ranges: Vec::new(),
            round: 0,
            repaired: 0,
            data_running: false,
            peer_ports: None,
            early: None,
            first_phase: 0,
            skip_ready: false,
            path_memory: None,
            inbox: VecDeque::new(),
            effects: VecDeque::new(),
            deadline: Deadline::default(),
        };
        receiving.wait(now, "the manifest", timeouts.reply);
        receiving
    }

    /// A transfer whose sender starts the data before `Want` ([`crate::Sending::new_early`]),
    /// to ports this end gave it beforehand. With `sockets` (this end's phase-0 sockets are
    /// still bound and may take that data) the driver keeps them for phase 0, or closes them
    /// at [`RecvEffect::DropEarly`]; without, the early start is declined whatever the plan
    /// (the sockets are gone: a server that had to wait for a place, say).
    pub fn new_early(now: Instant, timeouts: Timeouts, sockets: bool) -> Receiving {
        let mut receiving = Receiving::new(now, timeouts);
        receiving.early = Some(sockets);
        receiving
    }

    /// The phase of the transfer's first data: 0, or [`RESTART_PHASE`] once this end declined
    /// an early start (repair rounds are phases 1 and up).
    pub fn first_phase(&self) -> u32 {
        self.first_phase
    }

    /// The next thing to do, in order.
    pub fn poll_effect(&mut self) -> Option<RecvEffect> {
        self.effects.pop_front()
    }

    /// When [`Receiving::handle_timeout`] is due, if a wait has a deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline.at()
    }

    /// Whether the transfer has ended ([`RecvEffect::Done`] was issued).
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The wanted files, laid end to end (empty before the plan).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Bytes already here from an interrupted transfer, once the sender's verdict came.
    pub fn resumed(&self) -> u64 {
        bytes_in(&self.present)
    }

    /// A message from the sender.
    pub fn handle_message(&mut self, now: Instant, msg: SenderMsg) {
        match msg {
            _ if self.state == State::Done => {}
            SenderMsg::Failed { code, message } => self.end(Err(Fault::Peer { code, message })),
            SenderMsg::Digests { blake3 } if self.state != State::AwaitManifest => {
                match parse_hashes(&blake3, "Digests") {
                    Ok(more) if self.digests.len() + more.len() <= self.layout.len() => {
                        self.digests.extend(more);
                        if self.state == State::AwaitDigests {
                            self.compare();
                        }
                    }
                    Ok(more) => self.protocol(format!(
                        "{} digests for {} files",
                        self.digests.len() + more.len(),
                        self.layout.len()
                    )),
                    Err(e) => self.protocol(e),
                }
            }
            msg => {
                self.inbox.push_back(msg);
                self.pump(now);
            }
        }
    }

    /// The sender ended its side of the stream before this end finished: a protocol error.
    pub fn handle_peer_finished(&mut self, now: Instant) {
        let _ = now;
        self.protocol("the sender ended the stream before the transfer ended".into());
    }

    /// The driver's plan of the manifest.
    pub fn handle_planned(&mut self, now: Instant, planned: Planned) {
        if self.state != State::Planning {
            return;
        }
        let count = self.manifest_sizes.len();
        let increasing = planned.files.windows(2).all(|w| w[0] < w[1]);
        if !increasing || planned.files.last().is_some_and(|&n| n as usize >= count) {
            return self.local(ErrorCode::Io, "the plan names files the manifest does not have");
        }
        self.layout = Layout::new(planned.files.iter().map(|&n| self.manifest_sizes[n as usize]));
        let resume = planned
            .offers
            .iter()
            .map(|(file, hashes)| BlockHashes { file: *file, blocks: hex(hashes) })
            .collect();
        self.offered = planned.offers.iter().map(|(f, h)| (*f, h.len())).collect();
        // An early start is taken when it sends what this end wants: every file, whole.
        let take_early = self.early == Some(true)
            && planned.files.len() == count
            && planned.offers.is_empty()
            && !planned.dry_run;
        if self.early.is_some() && !take_early {
            self.effects.push_back(RecvEffect::DropEarly);
            self.first_phase = RESTART_PHASE;
            // The sender bound its sockets and said so right behind the manifest whenever a
            // file has bytes: that `Ready` belongs to the declined start.
            self.skip_ready = self.manifest_sizes.iter().sum::<u64>() > 0;
        }
        self.send(ReceiverMsg::Want(Want {
            files: to_ranges(planned.files.iter().copied()),
            replaced: planned.replaced,
            kept: planned.kept,
            resume,
            dry_run: planned.dry_run,
            early: take_early,
        }));
        if planned.dry_run {
            return self.end(Ok(Received {
                digests: Vec::new(),
                repaired: 0,
                resumed: 0,
                dry_run: true,
                path_memory: None,
            }));
        }
        if take_early {
            // The sockets are bound and the sender has their ports.
            self.after_want(now);
        } else if self.layout.total() > 0 {
            // The sockets and their Ready go right behind Want: the sender need not wait a
            // round trip for them once it knows what moves.
            self.bind(self.first_phase);
        } else {
            self.after_want(now);
        }
    }

    /// This end's data sockets of `phase` are bound, at these ports.
    pub fn handle_bound(&mut self, now: Instant, phase: u32, ports: Vec<u16>) {
        if self.state != State::Binding(phase) {
            return;
        }
        self.send(ReceiverMsg::Ready { udp_ports: ports });
        if phase == self.first_phase {
            self.after_want(now);
        } else {
            self.state = State::AwaitRepairing;
            let bad_bytes = self.bad.iter().filter_map(|&k| self.layout.file(k)).map(|f| f.0).sum();
            self.wait(now, "the sender's Repairing", self.timeouts.hash_budget(bad_bytes));
            self.pump(now);
        }
    }

    /// Every byte of `phase`'s span is written, and these are the hashes of its files.
    pub fn handle_received(&mut self, now: Instant, phase: u32, hashes: Vec<blake3::Hash>) {
        if self.state != State::Receiving(phase) {
            return;
        }
        if phase == self.first_phase {
            if hashes.len() != self.layout.len() {
                return self.local(ErrorCode::Io, "the receive hashed another number of files");
            }
            self.actual = Some(hashes);
        } else {
            let (first, last) = self.repair_files();
            match self.actual.as_mut() {
                Some(actual) if hashes.len() == last + 1 - first => {
                    actual.splice(first..=last, hashes);
                }
                _ => return self.local(ErrorCode::Io, "a repair hashed another number of files"),
            }
        }
        self.state = State::AwaitDigests;
        let wait = self.timeouts.digests.unwrap_or(self.timeouts.hash_budget(self.layout.total()));
        self.wait(now, "the sender's Digests", wait);
        self.compare();
    }

    /// `phase`'s data channels ended.
    pub fn handle_data_ended(&mut self, now: Instant, phase: u32) {
        let _ = (now, phase);
        self.data_running = false;
    }

    /// Every block's BLAKE3 of each file of [`RecvEffect::HashBlocks`], in its order.
    pub fn handle_blocks_hashed(&mut self, now: Instant, hashed: Vec<Vec<blake3::Hash>>) {
        if self.state != State::HashingBlocks {
            return;
        }
        if hashed.len() != self.bad.len() {
            return self.local(ErrorCode::Io, "hashed the blocks of other files than asked");
        }
        let files = self
            .bad
            .iter()
            .zip(&hashed)
            .map(|(&k, hashes)| BlockHashes { file: k as u32, blocks: hex(hashes) })
            .collect();
        self.send(ReceiverMsg::Repair { files });
        self.round += 1;
        // The sockets and their Ready go right behind Repair, as behind Want.
        self.bind(self.round);
        let _ = now;
    }

    /// The files are stored (`Ok`), or not (`Err`: the class and words for the sender).
    pub fn handle_committed(&mut self, result: Result<(), (ErrorCode, String)>) {
        if self.state != State::Committing {
            return;
        }
        match result {
            Ok(()) => {
                self.send(ReceiverMsg::Verified);
                let digests = std::mem::take(&mut self.digests);
                let outcome = Received {
                    digests,
                    repaired: self.repaired,
                    resumed: bytes_in(&self.present),
                    dry_run: false,
                    path_memory: self.path_memory,
                };
                self.end(Ok(outcome));
            }
            Err((code, message)) => self.end(Err(Fault::Local { code, message })),
        }
    }

    /// This end failed (planning, a data channel, a file): the sender is told, and the
    /// transfer ends with [`Fault::Local`].
    pub fn handle_failure(&mut self, code: ErrorCode, message: String) {
        self.end(Err(Fault::Local { code, message }));
    }

    /// The deadline of [`Receiving::poll_timeout`] passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(fault) = self.deadline.passed(now) {
            self.end(Err(fault));
        }
    }

    fn wait(&mut self, now: Instant, what: &'static str, wait: Duration) {
        self.deadline.set(now, what, wait);
    }

    fn send(&mut self, msg: ReceiverMsg) {
        self.effects.push_back(RecvEffect::Send(msg));
    }

    fn local(&mut self, code: ErrorCode, message: &str) {
        self.end(Err(Fault::Local { code, message: message.to_owned() }));
    }

    fn protocol(&mut self, why: String) {
        self.end(Err(Fault::Protocol(why)));
    }

    fn end(&mut self, outcome: Result<Received, Fault>) {
        if self.state == State::Done {
            return;
        }
        if let Err(fault) = &outcome {
            if let Some((code, message)) = fault.to_send() {
                self.send(ReceiverMsg::Failed { code, message });
            }
            if self.data_running {
                self.effects.push_back(RecvEffect::StopData);
            }
        }
        self.state = State::Done;
        self.deadline.clear();
        self.effects.push_back(RecvEffect::Done(outcome));
    }

    fn bind(&mut self, phase: u32) {
        self.state = State::Binding(phase);
        self.deadline.clear();
        self.effects.push_back(RecvEffect::Bind { phase });
    }

    fn listening(&self) -> bool {
        matches!(
            self.state,
            State::AwaitManifest
                | State::AwaitResumed
                | State::AwaitPeerReady(_)
                | State::Receiving(_)
                | State::AwaitDigests
                | State::AwaitRepairing
        )
    }

    fn pump(&mut self, now: Instant) {
        while self.listening()
            && let Some(msg) = self.inbox.pop_front()
        {
            if let SenderMsg::Ready { path_memory: Some(start), .. } = &msg {
                self.path_memory.get_or_insert(*start);
            }
            if self.skip_ready && matches!(msg, SenderMsg::Ready { .. }) {
                self.skip_ready = false;
                continue;
            }
            match (self.state, msg) {
                (State::AwaitManifest, SenderMsg::Manifest(part)) => {
                    match self.manifest.add(part) {
                        Ok(None) => self.wait(now, "the manifest", self.timeouts.reply),
                        Ok(Some(entries)) => {
                            self.manifest_sizes = entries
                                .iter()
                                .filter(|e| e.kind == EntryKind::File)
                                .map(|e| e.size)
                                .collect();
                            self.state = State::Planning;
                            self.deadline.clear();
                            self.effects.push_back(RecvEffect::Plan(entries));
                        }
                        Err(e) => self.protocol(e),
                    }
                }
                (State::AwaitResumed, SenderMsg::Resumed { kept }) => {
                    match self.layout.present(&self.offered, &kept) {
                        Ok(present) => {
                            self.present = present;
                            self.start_first_phase(now);
                        }
                        Err(e) => self.protocol(e),
                    }
                }
                (State::AwaitPeerReady(phase), SenderMsg::Ready { udp_ports, .. }) => {
                    self.peer_ports = Some(udp_ports);
                    self.start_phase(phase);
                }
                (State::AwaitRepairing, SenderMsg::Repairing { blocks }) => {
                    self.on_repairing(now, blocks);
                }
                (state, msg) => self.protocol(format!("unexpected {msg:?} ({state:?})")),
            }
        }
    }

    fn after_want(&mut self, now: Instant) {
        if self.offered.is_empty() {
            self.start_first_phase(now);
        } else {
            self.state = State::AwaitResumed;
            self.wait(
                now,
                "the sender's verdict on the resume offers (Resumed)",
                self.timeouts.reply,
            );
            self.pump(now);
        }
    }

    fn start_first_phase(&mut self, now: Instant) {
        let first = self.first_phase;
        if bytes_in(&self.present) < self.layout.total() {
            self.state = State::AwaitPeerReady(first);
            self.wait(now, "the sender's Ready", self.timeouts.reply);
            self.pump(now);
        } else {
            self.start_phase(first);
        }
    }

    /// Starts `phase`'s receive with the sender's ports, if any came.
    fn start_phase(&mut self, phase: u32) {
        let peer_ports = self.peer_ports.take();
        let (span, present, ends) = if phase == self.first_phase {
            (0..self.layout.total(), self.present.clone(), self.layout.ends())
        } else {
            let (first, last) = self.repair_files();
            let (span, ends) = self.layout.span(first..last + 1);
            (span.clone(), complement(&self.repair_ranges, span), ends)
        };
        self.deadline.clear();
        self.state = State::Receiving(phase);
        self.data_running = peer_ports.is_some();
        self.effects.push_back(RecvEffect::StartData { phase, peer_ports, span, present, ends });
    }

    /// The first and last wanted file of the current repair round.
    fn repair_files(&self) -> (usize, usize) {
        let first = self.bad.first().copied().unwrap_or(0);
        (first, self.bad.last().copied().unwrap_or(first))
    }

    /// Once this end's data is all here and hashed: waits for the rest of the digests, then
    /// repairs what differs or stores.
    fn compare(&mut self) {
        if self.state != State::AwaitDigests || self.digests.len() < self.layout.len() {
            return;
        }
        let Some(actual) = self.actual.clone() else { return };
        // An empty file has no block to mend: its mismatch is the sender's digest's.
        let bad: Vec<usize> = (0..actual.len())
            .filter(|&k| actual[k] != self.digests[k])
            .filter(|&k| self.layout.file(k).is_some_and(|(size, _)| size > 0))
            .collect();
        if bad.is_empty() || self.round >= MAX_REPAIR_ROUNDS {
            return self.commit(actual);
        }
        self.bad = bad.clone();
        self.deadline.clear();
        self.state = State::HashingBlocks;
        self.effects.push_back(RecvEffect::HashBlocks(bad.iter().map(|&k| k as u32).collect()));
    }

    fn on_repairing(&mut self, now: Instant, blocks: Vec<[u64; 2]>) {
        let ranges = match self.layout.block_ranges(&blocks, Some(&self.bad)) {
            Ok(ranges) => ranges,
            Err(e) => return self.protocol(e),
        };
        if ranges.is_empty() {
            // The sender's blocks are what this end has: the source changed after it was
            // hashed, and no repair can help.
            let actual = self.actual.clone().unwrap_or_default();
            return self.commit(actual);
        }
        self.repaired += blocks.len() as u64;
        self.repair_ranges = ranges;
        self.state = State::AwaitPeerReady(self.round);
        self.wait(now, "the sender's Ready", self.timeouts.reply);
        self.pump(now);
    }

    fn commit(&mut self, actual: Vec<blake3::Hash>) {
        self.deadline.clear();
        self.state = State::Committing;
        self.effects.push_back(RecvEffect::Commit { expected: self.digests.clone(), actual });
    }
}
