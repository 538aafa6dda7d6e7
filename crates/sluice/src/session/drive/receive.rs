//! The receiving role on a QUIC stream, UDP data channels and files.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use sluice_session::messages::SenderMsg;
use sluice_session::{Planned, Received, Receiving, RecvEffect};
use tokio::task::JoinHandle;

use super::{
    Channels, DataPlan, Wire, fail, hash_blocks, join_job, planned_files, sleep_until, take_read,
    write_msg,
};
use crate::datapath::{ChannelReport, Progress};
use crate::session::SessionError;
use crate::session::blocks::data_store;
use crate::session::channel::{Receive, Step};
use crate::session::observe::AnyObserver;
use crate::session::{mismatch_error, plan_error};
use crate::tree::{Committed, FileSet, Incoming, ReceiveOptions, plan};

/// Where a receiving end puts what comes.
pub(crate) struct Destination {
    /// The path the files go to or into, resolved already.
    pub(crate) dest: PathBuf,
    pub(crate) options: ReceiveOptions,
    pub(crate) dry_run: bool,
    /// Phase 0's sockets, bound before the transfer began, whose ports the sender has: an
    /// early start ([`Receiving::new_early`]).
    pub(crate) early: Option<Vec<std::net::UdpSocket>>,
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
    /// The sender started early and this end took that data.
    pub(crate) early: bool,
}

/// Runs `machine` as the receiving end of a request, into `destination`.
pub(crate) async fn run_receiving(
    mut machine: Receiving,
    wire: &mut Wire<'_, '_, SenderMsg>,
    channels: &Channels<'_>,
    destination: Destination,
    mut observer: Option<AnyObserver>,
) -> Result<ReceivedReport, SessionError> {
    let Destination { dest, options, dry_run, early } = destination;
    let mut incoming: Option<Incoming> = None;
    let mut names = Vec::new();
    let mut counts = (0, 0, 0, 0);
    let mut files: Arc<FileSet> = Arc::new(FileSet::new(Vec::new(), true));
    // Data phases started: a test fault goes by them ([`data_store`]).
    let mut passes = 0u32;
    let started_early = early.is_some();
    let mut sockets = early;
    let mut receiving: Option<(u32, Receive, bool)> = None;
    let mut first_report: Option<ChannelReport> = None;
    let mut job: Option<JoinHandle<RecvJob>> = None;
    let mut committed = Committed::default();
    let mut local: Option<SessionError> = None;
    let mut dest = Some(dest);
    let hide = wire.hide;
    let outcome = loop {
        let mut ended = None;
        while let Some(effect) = machine.poll_effect() {
            let now = Instant::now();
            match effect {
                RecvEffect::Send(msg) => write_msg(wire, &mut machine, &msg, &mut local).await,
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
                    let first = phase == machine.first_phase();
                    // A repair opens channels of its own: the last phase's end first.
                    if let Some((last_phase, mut last, _)) = receiving.take() {
                        let report = last.report().await;
                        if last_phase == machine.first_phase() {
                            first_report = report;
                        }
                    }
                    let params = match &peer_ports {
                        Some(ports) => match channels.params(phase, sockets.take(), ports, None) {
                            Ok(params) => params,
                            Err(err) => {
                                fail(&mut machine, &mut local, hide, err);
                                continue;
                            }
                        },
                        None => DataPlan::Channels(Vec::new()),
                    };
                    let store = data_store(&files, channels.fault, false, passes);
                    passes += 1;
                    let mut progress = observer.take().filter(|_| first);
                    let mut keeper =
                        if first { incoming.as_ref().map(Incoming::keeper) } else { None };
                    let task = Receive::spawn(move |hashed, cancel| {
                        let mut prefix = 0;
                        let mut tell = |p: Progress| {
                            prefix = p.prefix;
                            if let Some(keeper) = keeper.as_mut() {
                                keeper.update(p.prefix, false);
                            }
                            if let Some(o) = progress.as_mut() {
                                o.progress(p);
                            }
                        };
                        let received = params
                            .receive(&*store, span, &present, ends, &mut tell, hashed, cancel);
                        // Cut off, the record says all that is on disk (the last progress may
                        // have come within the record's interval of the one before, and a
                        // page's pieces land a few MiB at once). Received whole, nothing is
                        // recorded: the hashes went out as the last byte landed, while the
                        // channels lingered, and the commit may already have removed the
                        // record; a record of the last progress's prefix written now stayed
                        // beside the finished file (seen once in a full local CI run, under
                        // load: `sigterm_stops_the_server_cleanly_and_the_upload_resumes`
                        // found two entries where only the file should be).
                        if let (Some(keeper), Err(_)) = (keeper.as_mut(), &received) {
                            keeper.update(prefix, true);
                        }
                        received
                    });
                    receiving = Some((phase, task, false));
                }
                RecvEffect::StopData => {
                    if let Some((_, mut task, _)) = receiving.take() {
                        task.stop().await;
                    }
                }
                RecvEffect::DropEarly => sockets = None,
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
            read = wire.messages.next(), if wire.open => {
                take_read(wire, &mut machine, read, &mut local);
            }
            (phase, step) = receive_step(&mut receiving) => match step {
                Step::Hashed(hashes) => {
                    if let Some((_, _, delivered)) = receiving.as_mut() {
                        *delivered = true;
                    }
                    machine.handle_received(Instant::now(), phase, hashes);
                }
                Step::Ended(done) => {
                    let delivered = receiving.take().is_some_and(|(_, _, delivered)| delivered);
                    match done.and_then(|r| r.map_err(|e| channels.setup.data_error(e))) {
                        Ok(received) => {
                            if phase == machine.first_phase() {
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
            return Err(wire.fault(fault, local, channels.peer()));
        }
    };
    let lingering = match receiving.take() {
        Some((phase, task, _)) if phase == machine.first_phase() => Some(task),
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
        early: started_early && machine.first_phase() == 0,
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

/// The next step of the running receive, with its phase; without one, never.
async fn receive_step(receiving: &mut Option<(u32, Receive, bool)>) -> (u32, Step) {
    match receiving {
        Some((phase, task, _)) => (*phase, task.step().await),
        None => std::future::pending().await,
    }
}
