//! The quinn-and-files driver of the transfer machines of `sluice-session`: one function runs
//! the sending role ([`run_sending`]) and one the receiving role ([`run_receiving`]), each on
//! a request's QUIC stream, UDP data channels and files. The server and the client call the
//! same two: an upload is the client's `run_sending` against the server's `run_receiving`, a
//! download the other way round.
//!
//! Each loops the same way: do every effect the machine asks for (messages are written in
//! order; file work runs on the blocking pool; data channels on their own threads), then wait
//! for the first of a message, a finished job, a data phase's end or the machine's deadline,
//! and hand it in. A failure of this end is handed in too ([`Sending::handle_failure`]), so the
//! peer always hears why, and is returned as it happened.

use std::net::{IpAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use sluice_session::messages::{ErrorCode, ReceiverMsg, SenderMsg};
use sluice_session::sending::SENDER_GRACE;
use sluice_session::{Fault, Planned, Received, Receiving, RecvEffect, SendEffect, Sending, Sent};
use tokio::task::JoinHandle;

use super::SessionError;
use super::blocks::{DataStore, data_store, file_blocks};
use super::channel::{
    ChannelSetup, DataTask, Receive, Step, bind_data_sockets, data_error, frame_error,
};
use super::messages::{FrameError, Messages, write_message};
use super::observe::{CopyObserver, PlannedFile};
use super::{mismatch_error, plan_error};
use crate::datapath::{self, ChannelReport, DataError, Fault as TestFault, Progress};
use crate::files::hash_extents;
use crate::tree::resume::matching_prefix;
use crate::tree::{Committed, EntryKind, FileSet, Incoming, Outgoing, ReceiveOptions, plan};

/// One end of a request's stream.
pub(crate) struct Wire<'a, 's, M> {
    pub(crate) conn: &'a quinn::Connection,
    pub(crate) send: &'a mut quinn::SendStream,
    pub(crate) messages: Messages<'s, M>,
    /// Whether the peer knows how the transfer ended: this end's `Failed` went out, or the
    /// peer's came (the caller need not send one).
    pub(crate) told: bool,
    /// Whether the transfer ended with the peer's `Failed`.
    pub(crate) peer_failed: bool,
    /// A directory whose path this end's failures must not show (a server's root): the peer
    /// reads paths as it named them.
    pub(crate) hide: Option<&'a Path>,
}

impl<'a, 's, M: serde::de::DeserializeOwned + Send + 's> Wire<'a, 's, M> {
    pub(crate) fn new(
        conn: &'a quinn::Connection,
        send: &'a mut quinn::SendStream,
        recv: &'s mut quinn::RecvStream,
    ) -> Self {
        Wire {
            conn,
            send,
            messages: Messages::new(recv),
            told: false,
            peer_failed: false,
            hide: None,
        }
    }

    /// The error a machine's fault stands for, noting a peer's failure.
    fn fault(&mut self, fault: Fault, local: Option<SessionError>) -> SessionError {
        if matches!(fault, Fault::Peer { .. }) {
            self.told = true;
            self.peer_failed = true;
        }
        fault_error(fault, local)
    }

    async fn write<T: serde::Serialize>(&mut self, msg: &T) -> Result<(), SessionError> {
        write_message(self.send, msg).await.map_err(|e| frame_error(e, self.conn))
    }
}

/// What the data channels and the files of one end need.
pub(crate) struct Channels<'a> {
    pub(crate) setup: ChannelSetup<'a>,
    /// For tests of repair: a fault in this end's data path.
    pub(crate) fault: Option<TestFault>,
}

impl Channels<'_> {
    fn peer_ip(&self) -> IpAddr {
        self.setup.conn.remote_address().ip().to_canonical()
    }

    fn bind(&self) -> Result<(Vec<UdpSocket>, Vec<u16>), SessionError> {
        let local = self.setup.conn.local_ip().map(|ip| ip.to_canonical());
        bind_data_sockets(self.setup.negotiated.channels, local, self.peer_ip())
    }

    fn params(
        &self,
        phase: u32,
        sockets: Option<Vec<UdpSocket>>,
        peer_ports: &[u16],
    ) -> Result<Vec<datapath::ChannelParams>, SessionError> {
        let sockets = sockets.ok_or_else(|| {
            SessionError::Protocol(format!("data of phase {phase} before its sockets were bound"))
        })?;
        ChannelSetup { phase, ..self.setup }.params(sockets, self.peer_ip(), peer_ports)
    }
}

/// Either machine, as far as this end's failures go.
trait Fails {
    fn handle_failure(&mut self, code: ErrorCode, message: String);
}

impl Fails for Sending {
    fn handle_failure(&mut self, code: ErrorCode, message: String) {
        Sending::handle_failure(self, code, message);
    }
}

impl Fails for Receiving {
    fn handle_failure(&mut self, code: ErrorCode, message: String) {
        Receiving::handle_failure(self, code, message);
    }
}

/// This end failed with `err`: the machine tells the peer (in words without the `hide`
/// directory's path), and the first such error is the one returned.
fn fail(
    machine: &mut impl Fails,
    local: &mut Option<SessionError>,
    hide: Option<&Path>,
    err: SessionError,
) {
    let words = match hide {
        Some(root) => unrooted(&err.detail(), root),
        None => err.detail(),
    };
    machine.handle_failure(err.code(), words);
    local.get_or_insert(err);
}

/// `message` with the server's own path of `root` taken out of every path in it, so that paths
/// read as the client names them (relative to the token's root).
pub(crate) fn unrooted(message: &str, root: &Path) -> String {
    let root = root.to_string_lossy();
    let within = format!("{}/", root.trim_end_matches('/'));
    message.replace(&within, "").replace(root.as_ref(), ".")
}

/// The error a machine's fault stands for, or `local` (this end's own failure) when it is
/// that.
fn fault_error(fault: Fault, local: Option<SessionError>) -> SessionError {
    match fault {
        Fault::Peer { code, message } => SessionError::from_remote(code, message),
        Fault::Protocol(m) => SessionError::Protocol(m),
        Fault::Timeout(m) => SessionError::Network(m),
        Fault::Local { code, message } => {
            local.unwrap_or_else(|| SessionError::from_remote(code, message))
        }
    }
}

/// Waits for an optional task; without one, never.
async fn join_some<T: Send + 'static>(task: &mut Option<DataTask<T>>) -> Result<T, SessionError> {
    match task {
        Some(task) => task.join().await,
        None => std::future::pending().await,
    }
}

async fn join_job<T>(job: &mut Option<JoinHandle<T>>) -> Result<T, SessionError> {
    match job {
        Some(handle) => {
            let result = handle.await;
            *job = None;
            result.map_err(|e| SessionError::io("file task", std::io::Error::other(e.to_string())))
        }
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// The files of `outgoing` the receiver wants (numbers among its files), end to end.
fn wanted_set(outgoing: &Outgoing, wanted: &[u32]) -> Result<FileSet, SessionError> {
    let sizes: Vec<u64> =
        outgoing.entries.iter().filter(|e| e.kind == EntryKind::File).map(|e| e.size).collect();
    let files = wanted
        .iter()
        .map(|&n| {
            let n = n as usize;
            Some((outgoing.files.get(n)?.clone(), *sizes.get(n)?))
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| SessionError::Protocol("Want names a file not in the manifest".into()))?;
    Ok(FileSet::new(files, false).confined(outgoing.fs.clone()))
}

/// The wanted files' names with their sizes, for an observer.
pub(crate) fn planned_files(names: &[String], files: &FileSet) -> Vec<PlannedFile> {
    names
        .iter()
        .enumerate()
        .map(|(k, path)| PlannedFile {
            path: path.clone(),
            size: files.file_at(k).map_or(0, |f| f.1),
        })
        .collect()
}

/// The manifest paths of `outgoing`'s files numbered `wanted`.
pub(crate) fn wanted_names(outgoing: &Outgoing, wanted: &[u32]) -> Vec<String> {
    let files: Vec<&str> = outgoing
        .entries
        .iter()
        .filter(|e| e.kind == EntryKind::File)
        .map(|e| e.path.as_str())
        .collect();
    wanted.iter().filter_map(|&n| files.get(n as usize)).map(|p| (*p).to_owned()).collect()
}

/// File work of the sending end, on the blocking pool.
enum SendJob {
    Resume(Result<Vec<u64>, SessionError>),
    Blocks(Result<Vec<Vec<blake3::Hash>>, SessionError>),
}

/// How a sending end's transfer went.
pub(crate) struct SentReport {
    pub(crate) sent: Sent,
    /// The wanted files' numbers among the manifest's files.
    pub(crate) wanted: Vec<u32>,
    /// Existing files the receiver replaced, and kept by its overwrite policy.
    pub(crate) replaced: u64,
    pub(crate) kept: u64,
    /// Bytes of the wanted files.
    pub(crate) size: u64,
    /// The first phase's channel report (`None` when no byte moved, or the channels were
    /// stopped by the receiver's answer before their last acknowledgement).
    pub(crate) report: Option<ChannelReport>,
    /// The last repair round's channel report.
    pub(crate) repair_report: Option<ChannelReport>,
}

/// Writes the messages a sending machine opens with (its manifest), before anything comes
/// back: a client sends them behind its request without waiting for the server's answer to
/// its token.
pub(crate) async fn write_opening(
    machine: &mut Sending,
    wire: &mut Wire<'_, '_, ReceiverMsg>,
) -> Result<(), SessionError> {
    while let Some(effect) = machine.poll_effect() {
        match effect {
            SendEffect::Send(msg) => wire.write(&msg).await?,
            other => {
                return Err(SessionError::Protocol(format!("{other:?} before any answer")));
            }
        }
    }
    Ok(())
}

/// Runs `machine` (whose manifest is `outgoing`'s) as the sending end of a request.
pub(crate) async fn run_sending<O: CopyObserver>(
    mut machine: Sending,
    wire: &mut Wire<'_, '_, ReceiverMsg>,
    channels: &Channels<'_>,
    outgoing: &Outgoing,
    compress: Option<i32>,
    mut observer: Option<O>,
) -> Result<SentReport, SessionError> {
    let mut files: Arc<FileSet> = Arc::new(FileSet::new(Vec::new(), false));
    let mut store: DataStore = files.clone();
    let mut wanted = Vec::new();
    let mut choice = (0, 0, false);
    let mut sockets = None;
    let mut data: Option<(u32, DataTask<Result<ChannelReport, DataError>>)> = None;
    let mut grace: Option<Instant> = None;
    let mut hashing: Option<DataTask<std::io::Result<Option<Vec<blake3::Hash>>>>> = None;
    let mut job: Option<JoinHandle<SendJob>> = None;
    let mut reports: (Option<ChannelReport>, Option<ChannelReport>) = (None, None);
    let mut local: Option<SessionError> = None;
    let hide = wire.hide;
    // Whether the peer may still send (it has not finished its side of the stream).
    let mut open = true;
    let outcome = loop {
        let mut ended = None;
        while let Some(effect) = machine.poll_effect() {
            let now = Instant::now();
            match effect {
                SendEffect::Send(msg) => {
                    let failed = matches!(msg, SenderMsg::Failed { .. });
                    if let Err(err) = wire.write(&msg).await {
                        if !failed {
                            fail(&mut machine, &mut local, hide, err);
                        }
                    } else if failed {
                        wire.told = true;
                    }
                }
                SendEffect::Wanted { files: numbers, replaced, kept, dry_run } => {
                    choice = (replaced, kept, dry_run);
                    match wanted_set(outgoing, &numbers) {
                        Ok(set) => {
                            files = Arc::new(set);
                            store = data_store(&files, channels.fault, true);
                            if !dry_run
                                && !files.is_empty()
                                && let Some(observer) = observer.as_mut()
                            {
                                let names = wanted_names(outgoing, &numbers);
                                observer.planned(&planned_files(&names, &files));
                            }
                        }
                        Err(err) => {
                            fail(&mut machine, &mut local, hide, err);
                        }
                    }
                    wanted = numbers;
                }
                SendEffect::CheckResume(offers) => {
                    let files = files.clone();
                    job = Some(tokio::task::spawn_blocking(move || {
                        SendJob::Resume(check_resume(&files, &offers))
                    }));
                }
                SendEffect::Bind { phase } => match channels.bind() {
                    Ok((bound, ports)) => {
                        sockets = Some(bound);
                        machine.handle_bound(now, phase, ports);
                    }
                    Err(err) => {
                        fail(&mut machine, &mut local, hide, err);
                    }
                },
                SendEffect::StartData { phase, peer_ports, ranges } => {
                    if let Some((_, mut old)) = data.take() {
                        old.stop().await;
                    }
                    match channels.params(phase, sockets.take(), &peer_ports) {
                        Ok(params) => {
                            let store = store.clone();
                            let mut progress = observer.take().filter(|_| phase == 0);
                            data = Some((
                                phase,
                                DataTask::spawn(move |cancel| {
                                    let mut tell = |p: Progress| {
                                        if let Some(o) = progress.as_mut() {
                                            o.progress(p);
                                        }
                                    };
                                    datapath::send(
                                        params, &*store, &ranges, compress, &mut tell, cancel,
                                    )
                                }),
                            ));
                        }
                        Err(err) => {
                            fail(&mut machine, &mut local, hide, err);
                        }
                    }
                }
                SendEffect::HashFiles => {
                    let files = files.clone();
                    hashing = Some(DataTask::spawn(move |cancel| {
                        hash_extents(&*files, 0, files.ends(), cancel)
                    }));
                }
                SendEffect::StopData => grace = Some(now + SENDER_GRACE),
                SendEffect::StopHashing => hashing = None,
                SendEffect::HashBlocks(which) => {
                    let files = files.clone();
                    job = Some(tokio::task::spawn_blocking(move || {
                        SendJob::Blocks(hash_blocks(&files, &which))
                    }));
                }
                SendEffect::Done(outcome) => ended = Some(outcome),
            }
        }
        if let Some(outcome) = ended {
            break outcome;
        }
        tokio::select! {
            msg = wire.messages.next(), if open => match msg {
                Ok(msg) => machine.handle_message(Instant::now(), msg),
                Err(FrameError::Eof) => {
                    open = false;
                    machine.handle_peer_finished(Instant::now());
                }
                Err(e) => {
                    let err = frame_error(e, wire.conn);
                    fail(&mut machine, &mut local, hide, err);
                }
            },
            (phase, done) = data_end(&mut data) => {
                data = None;
                grace = None;
                match done.and_then(|r| r.map_err(|e| data_error(e, wire.conn))) {
                    Ok(report) if phase == 0 => reports.0 = Some(report),
                    Ok(report) => reports.1 = Some(report),
                    Err(err) => {
                        fail(&mut machine, &mut local, hide, err);
                    }
                }
                machine.handle_data_ended(Instant::now(), phase);
            }
            () = sleep_until(grace) => {
                grace = None;
                if let Some((phase, mut task)) = data.take() {
                    task.stop().await;
                    machine.handle_data_ended(Instant::now(), phase);
                }
            }
            hashed = join_some(&mut hashing) => {
                hashing = None;
                match hashed {
                    Ok(Ok(Some(hashes))) => machine.handle_hashed(Instant::now(), hashes),
                    Ok(Ok(None)) => {}
                    Ok(Err(e)) => {
                        let err = SessionError::io("hashing the files being sent", e);
                        fail(&mut machine, &mut local, hide, err);
                    }
                    Err(err) => {
                        fail(&mut machine, &mut local, hide, err);
                    }
                }
            }
            done = join_job(&mut job) => match done.and_then(|job| match job {
                SendJob::Resume(kept) => kept.map(|kept| machine.handle_resume_checked(Instant::now(), kept)),
                SendJob::Blocks(hashed) => hashed.map(|h| machine.handle_blocks_hashed(Instant::now(), h)),
            }) {
                Ok(()) => {}
                Err(err) => {
                    fail(&mut machine, &mut local, hide, err);
                }
            },
            () = sleep_until(machine.poll_timeout()) => machine.handle_timeout(Instant::now()),
        }
    };
    // Whatever still runs stops with the transfer.
    if let Some((_, mut task)) = data.take() {
        task.stop().await;
    }
    let sent = outcome.map_err(|fault| wire.fault(fault, local))?;
    if let Some(mut observer) = observer.filter(|_| !sent.dry_run) {
        // No byte moved (every byte was there already): the progress is told once anyway.
        observer.progress(Progress { bytes: 0, total: 0, prefix: 0 });
    }
    let (replaced, kept, _) = choice;
    Ok(SentReport {
        sent,
        wanted,
        replaced,
        kept,
        size: files.total(),
        report: reports.0,
        repair_report: reports.1,
    })
}

/// The end of the running data phase, with its number; without one, never.
async fn data_end<T: Send + 'static>(
    data: &mut Option<(u32, DataTask<T>)>,
) -> (u32, Result<T, SessionError>) {
    match data {
        Some((phase, task)) => (*phase, task.join().await),
        None => std::future::pending().await,
    }
}

/// The next step of the running receive, with its phase; without one, never.
async fn receive_step(receiving: &mut Option<(u32, Receive, bool)>) -> (u32, Step) {
    match receiving {
        Some((phase, task, _)) => (*phase, task.step().await),
        None => std::future::pending().await,
    }
}

/// The sender's verdict on resume offers: the leading bytes of each offered file that match.
fn check_resume(
    files: &FileSet,
    offers: &[(u32, Vec<blake3::Hash>)],
) -> Result<Vec<u64>, SessionError> {
    offers
        .iter()
        .map(|(k, hashes)| {
            let (path, size, _) = files.file_at(*k as usize).ok_or_else(|| {
                SessionError::Protocol(format!("a resume offer for file {k} of {}", files.len()))
            })?;
            let ctx = || format!("checking {} for a resume", path.display());
            let file = std::fs::File::open(path).map_err(|e| SessionError::io(ctx(), e))?;
            matching_prefix(&file, size, hashes).map_err(|e| SessionError::io(ctx(), e))
        })
        .collect()
}

/// Every block's BLAKE3 of each file `which` of `files`.
fn hash_blocks(files: &FileSet, which: &[u32]) -> Result<Vec<Vec<blake3::Hash>>, SessionError> {
    which
        .iter()
        .map(|&k| {
            file_blocks(files, k as usize)
                .map_err(|e| SessionError::io("hashing blocks to repair", e))
        })
        .collect()
}

/// Where a receiving end puts what comes.
pub(crate) struct Destination {
    /// The path the files go to or into, resolved already.
    pub(crate) dest: PathBuf,
    pub(crate) options: ReceiveOptions,
    pub(crate) dry_run: bool,
}

/// The receiver's plan: for the machine, the prepared files (none in a dry run), and the
/// wanted files' manifest paths.
type PlannedHere = (Planned, Option<Incoming>, Vec<String>);

/// File work of the receiving end, on the blocking pool.
enum RecvJob {
    Planned(Result<Box<PlannedHere>, SessionError>),
    Blocks(Result<Vec<Vec<blake3::Hash>>, SessionError>),
    Committed(Result<Committed, SessionError>),
}

/// How a receiving end's transfer went.
pub(crate) struct ReceivedReport {
    pub(crate) received: Received,
    /// The plan's counts: files that move (or would), existing files replaced and kept.
    pub(crate) files: u64,
    pub(crate) replaced: u64,
    pub(crate) kept: u64,
    /// Bytes of the wanted files (of a dry run: that would move).
    pub(crate) size: u64,
    /// A dry run's files that would move.
    pub(crate) planned: Vec<String>,
    /// What the commit stored.
    pub(crate) committed: Committed,
    /// The first phase's channel report, when its channels ended before the answer.
    pub(crate) report: Option<ChannelReport>,
    /// The first phase's receive, when its channels still linger for their senders'
    /// shutdown ([`Receive::report`] waits for them).
    pub(crate) lingering: Option<Receive>,
}

/// Runs `machine` as the receiving end of a request, into `destination`.
pub(crate) async fn run_receiving<O: CopyObserver>(
    mut machine: Receiving,
    wire: &mut Wire<'_, '_, SenderMsg>,
    channels: &Channels<'_>,
    destination: Destination,
    mut observer: Option<O>,
) -> Result<ReceivedReport, SessionError> {
    let Destination { dest, options, dry_run } = destination;
    let mut incoming: Option<Incoming> = None;
    let mut names = Vec::new();
    let mut counts = (0, 0, 0, 0);
    let mut files: Arc<FileSet> = Arc::new(FileSet::new(Vec::new(), true));
    let mut store: DataStore = files.clone();
    let mut sockets = None;
    let mut receiving: Option<(u32, Receive, bool)> = None;
    let mut first_report: Option<ChannelReport> = None;
    let mut job: Option<JoinHandle<RecvJob>> = None;
    let mut committed = Committed::default();
    let mut local: Option<SessionError> = None;
    let mut dest = Some(dest);
    let hide = wire.hide;
    // Whether the peer may still send (it has not finished its side of the stream).
    let mut open = true;
    let outcome = loop {
        let mut ended = None;
        while let Some(effect) = machine.poll_effect() {
            let now = Instant::now();
            match effect {
                RecvEffect::Send(msg) => {
                    let failed = matches!(msg, ReceiverMsg::Failed { .. });
                    if let Err(err) = wire.write(&msg).await {
                        if !failed {
                            fail(&mut machine, &mut local, hide, err);
                        }
                    } else if failed {
                        wire.told = true;
                    }
                }
                RecvEffect::Plan(entries) => {
                    let (dest, options) = (dest.take().unwrap_or_default(), options.clone());
                    job = Some(tokio::task::spawn_blocking(move || {
                        RecvJob::Planned(plan_here(&dest, entries, &options, dry_run).map(Box::new))
                    }));
                }
                RecvEffect::Bind { phase } => match channels.bind() {
                    Ok((bound, ports)) => {
                        sockets = Some(bound);
                        machine.handle_bound(now, phase, ports);
                    }
                    Err(err) => {
                        fail(&mut machine, &mut local, hide, err);
                    }
                },
                RecvEffect::StartData { phase, peer_ports, span, present, ends } => {
                    // A repair opens channels of its own: the last phase's end first.
                    if let Some((last_phase, mut last, _)) = receiving.take() {
                        let report = last.report().await;
                        if last_phase == 0 {
                            first_report = report;
                        }
                    }
                    let params = match &peer_ports {
                        Some(ports) => match channels.params(phase, sockets.take(), ports) {
                            Ok(params) => params,
                            Err(err) => {
                                fail(&mut machine, &mut local, hide, err);
                                continue;
                            }
                        },
                        None => Vec::new(),
                    };
                    let store = store.clone();
                    let mut progress = observer.take().filter(|_| phase == 0);
                    let mut keeper =
                        if phase == 0 { incoming.as_ref().map(Incoming::keeper) } else { None };
                    let task = Receive::spawn(move |hashed, cancel| {
                        let mut tell = |p: Progress| {
                            if let Some(keeper) = keeper.as_mut() {
                                keeper.update(p.prefix, false);
                            }
                            if let Some(o) = progress.as_mut() {
                                o.progress(p);
                            }
                        };
                        datapath::receive(
                            params, &*store, span, &present, ends, &mut tell, hashed, cancel,
                        )
                    });
                    receiving = Some((phase, task, false));
                }
                RecvEffect::StopData => {
                    if let Some((_, mut task, _)) = receiving.take() {
                        task.stop().await;
                    }
                }
                RecvEffect::HashBlocks(which) => {
                    let files = files.clone();
                    job = Some(tokio::task::spawn_blocking(move || {
                        RecvJob::Blocks(hash_blocks(&files, &which))
                    }));
                }
                RecvEffect::Commit { expected, actual } => match incoming.take() {
                    Some(incoming) => {
                        job = Some(tokio::task::spawn_blocking(move || {
                            RecvJob::Committed(
                                incoming.commit(&expected, &actual).map_err(plan_error),
                            )
                        }));
                    }
                    None => {
                        let err = SessionError::Protocol("a commit with nothing prepared".into());
                        fail(&mut machine, &mut local, hide, err);
                    }
                },
                RecvEffect::Done(outcome) => ended = Some(outcome),
            }
        }
        if let Some(outcome) = ended {
            break outcome;
        }
        tokio::select! {
            msg = wire.messages.next(), if open => match msg {
                Ok(msg) => machine.handle_message(Instant::now(), msg),
                Err(FrameError::Eof) => {
                    open = false;
                    machine.handle_peer_finished(Instant::now());
                }
                Err(e) => {
                    let err = frame_error(e, wire.conn);
                    fail(&mut machine, &mut local, hide, err);
                }
            },
            (phase, step) = receive_step(&mut receiving) => match step {
                Step::Hashed(hashes) => {
                    if let Some((_, _, delivered)) = receiving.as_mut() {
                        *delivered = true;
                    }
                    machine.handle_received(Instant::now(), phase, hashes);
                }
                Step::Ended(done) => {
                    let delivered = receiving.take().is_some_and(|(_, _, delivered)| delivered);
                    match done.and_then(|r| r.map_err(|e| data_error(e, wire.conn))) {
                        Ok(received) => {
                            if phase == 0 {
                                first_report = Some(received.report);
                            }
                            if !delivered {
                                machine.handle_received(Instant::now(), phase, received.hashes);
                            }
                            machine.handle_data_ended(Instant::now(), phase);
                        }
                        Err(err) => {
                            fail(&mut machine, &mut local, hide, err);
                        }
                    }
                }
            },
            done = join_job(&mut job) => {
                let result = done.and_then(|job| match job {
                    RecvJob::Planned(planned) => planned.map(|here| {
                        let (planned, prepared, wanted) = *here;
                        counts = (planned.files.len() as u64, planned.replaced, planned.kept, 0);
                        if let Some(prepared) = prepared {
                            files = Arc::new(prepared.store());
                            store = data_store(&files, channels.fault, false);
                            if !files.is_empty()
                                && let Some(observer) = observer.as_mut()
                            {
                                observer.planned(&planned_files(&wanted, &files));
                            }
                            incoming = Some(prepared);
                        }
                        names = wanted;
                        machine.handle_planned(Instant::now(), planned);
                        counts.3 = machine.layout().total();
                    }),
                    RecvJob::Blocks(hashed) => hashed.map(|h| machine.handle_blocks_hashed(Instant::now(), h)),
                    RecvJob::Committed(stored) => stored.map(|stored| {
                        let result = match mismatch_error(&stored) {
                            Some(err) => {
                                let answer = (err.code(), err.detail());
                                local.get_or_insert(err);
                                Err(answer)
                            }
                            None => Ok(()),
                        };
                        committed = stored;
                        machine.handle_committed(result);
                    }),
                });
                if let Err(err) = result {
                    fail(&mut machine, &mut local, hide, err);
                }
            }
            () = sleep_until(machine.poll_timeout()) => machine.handle_timeout(Instant::now()),
        }
    };
    let received = match outcome {
        Ok(received) => received,
        Err(fault) => {
            if let Some((_, mut task, _)) = receiving.take() {
                task.stop().await;
            }
            return Err(wire.fault(fault, local));
        }
    };
    let lingering = match receiving.take() {
        Some((0, task, _)) => Some(task),
        Some((_, mut task, _)) => {
            task.report().await;
            None
        }
        None => None,
    };
    let (files_n, replaced, kept, size) = counts;
    Ok(ReceivedReport {
        received,
        files: files_n,
        replaced,
        kept,
        size,
        planned: if dry_run { names } else { Vec::new() },
        committed,
        report: first_report,
        lingering,
    })
}

/// Plans `entries` at `dest`: the wanted files and, unless a dry run, the prepared temporary
/// files with their resume offers; with the wanted files' manifest paths.
fn plan_here(
    dest: &std::path::Path,
    entries: Vec<crate::tree::Entry>,
    options: &ReceiveOptions,
    dry_run: bool,
) -> Result<PlannedHere, SessionError> {
    let plan = plan(dest, entries, options).map_err(plan_error)?;
    let names: Vec<String> = plan.wanted_paths().map(str::to_owned).collect();
    let mut planned = Planned {
        files: plan.wanted().to_vec(),
        replaced: plan.replaced,
        kept: plan.kept,
        offers: Vec::new(),
        dry_run,
    };
    if dry_run {
        return Ok((planned, None, names));
    }
    let incoming = plan.prepare().map_err(plan_error)?;
    planned.offers = incoming.offers().to_vec();
    Ok((planned, Some(incoming), names))
}
