//! The sending role on a QUIC stream, UDP data channels and files.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_proto::pmtu::starting_datagram_bytes;
use sluice_session::messages::ReceiverMsg;
use sluice_session::sending::SENDER_GRACE;
use sluice_session::{SendEffect, Sending, Sent, Timeouts};
use tokio::task::JoinHandle;

use super::data::DataPlan;
use super::{
    Channels, Wire, fail, hash_blocks, join_job, join_some, planned_files, sleep_until, take_read,
    write_msg,
};
use crate::datapath::{ChannelReport, DataError, Progress};
use crate::files::hash_extents;
use crate::session::blocks::data_store;
use crate::session::channel::DataTask;
use crate::session::observe::AnyObserver;
use crate::session::{SessionError, lock};
use crate::tree::resume::matching_prefix;
use crate::tree::{EntryKind, FileSet, Outgoing};

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
    /// The data started early and the receiver took it.
    pub(crate) early: bool,
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
            SendEffect::Send(msg) => {
                if let Err(err) = wire.write(&msg).await {
                    // The server may have refused the request and stopped reading: its
                    // `Failed` says why.
                    return match wire.peer_failure::<Sending>().await {
                        Some(ReceiverMsg::Failed { code, message }) => {
                            Err(SessionError::from_server(code, message))
                        }
                        _ => Err(err),
                    };
                }
            }
            other => {
                return Err(SessionError::Protocol(format!("{other:?} before any answer")));
            }
        }
    }
    Ok(())
}

/// Runs `machine` (whose manifest is `outgoing`'s) as the sending end of a request.
pub(crate) async fn run_sending(
    mut machine: Sending,
    wire: &mut Wire<'_, '_, ReceiverMsg>,
    channels: &Channels<'_>,
    outgoing: &Outgoing,
    compress: Option<i32>,
    observer: Option<AnyObserver>,
) -> Result<SentReport, SessionError> {
    let mut files: Arc<FileSet> = Arc::new(FileSet::new(Vec::new(), false));
    // Data phases started: a test fault goes by them ([`data_store`]).
    let mut passes = 0u32;
    let mut wanted = Vec::new();
    // The files were laid out for an early start ([`SendEffect::Early`]).
    let mut early_laid_out = false;
    // Shared with the data's thread, which tells it the progress only once the files are
    // agreed (an early start's data runs before that).
    let planned = Arc::new(AtomicBool::new(false));
    let observer = Arc::new(Mutex::new(observer));
    // Whether a first phase's data was given the observer (it tells the last progress).
    let mut data_told = false;
    let mut choice = (0, 0, false);
    let mut sockets = None;
    // Path memory for the first phase, recalled when its sockets are bound.
    let mut recall = None;
    let mut data: Option<(u32, DataTask<Result<ChannelReport, DataError>>)> = None;
    let mut grace: Option<Instant> = None;
    let mut hashing: Option<DataTask<std::io::Result<Option<Vec<blake3::Hash>>>>> = None;
    let mut job: Option<JoinHandle<SendJob>> = None;
    let mut reports: (Option<ChannelReport>, Option<ChannelReport>) = (None, None);
    let mut local: Option<SessionError> = None;
    let hide = wire.hide;
    let started_early = machine.is_unconfirmed();
    // An early start's data waits long for its first answer (the receiver runs only once the
    // server planned); once the server's `Want` came, the receiver runs, and the usual idle
    // timeout holds from then: no byte acknowledged by then means nothing gets through (a path
    // that drops the data's datagrams but carries the session's and the channels' small ones).
    let heard = Arc::new(AtomicBool::new(false));
    let mut patient_data = false;
    let mut contact_by: Option<Instant> = None;
    let idle = Duration::from_micros(channels.setup.base.idle_timeout_us);
    let outcome = loop {
        let mut ended = None;
        while let Some(effect) = machine.poll_effect() {
            let now = Instant::now();
            match effect {
                SendEffect::Send(msg) => write_msg(wire, &mut machine, &msg, &mut local).await,
                SendEffect::Wanted { files: numbers, replaced, kept, dry_run } => {
                    choice = (replaced, kept, dry_run);
                    // An early start taken keeps the files laid out for it: its data reads
                    // from that store.
                    let laid_out = std::mem::take(&mut early_laid_out) && numbers == wanted;
                    let set = match laid_out {
                        true => Ok(()),
                        // Laid out anew: a test fault starts over, as on fresh files.
                        false => wanted_set(outgoing, &numbers).map(|set| {
                            files = Arc::new(set);
                            passes = 0;
                        }),
                    };
                    match set {
                        Ok(()) => {
                            if !dry_run
                                && !files.is_empty()
                                && let Some(observer) = lock(&observer).as_mut()
                            {
                                let names = wanted_names(outgoing, &numbers);
                                observer.planned(&planned_files(&names, &files));
                            }
                            planned.store(true, Ordering::Release);
                        }
                        Err(err) => {
                            fail(&mut machine, &mut local, hide, err);
                        }
                    }
                    wanted = numbers;
                }
                SendEffect::Early { files: numbers } => match wanted_set(outgoing, &numbers) {
                    Ok(set) => {
                        files = Arc::new(set);
                        wanted = numbers;
                        early_laid_out = true;
                    }
                    Err(err) => {
                        fail(&mut machine, &mut local, hide, err);
                    }
                },
                SendEffect::CancelData => {
                    grace = None;
                    if let Some((_, mut task)) = data.take() {
                        task.stop().await;
                    }
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
                        // A repair round is too short to start from or teach anything.
                        recall =
                            (phase == machine.first_phase()).then(|| channels.recall()).flatten();
                        let note = recall.as_ref().and_then(|r| r.note());
                        machine.handle_bound_from(now, phase, ports, note);
                    }
                    Err(err) => {
                        fail(&mut machine, &mut local, hide, err);
                    }
                },
                SendEffect::StartData { phase, peer_ports, ranges } => {
                    if let Some((_, mut old)) = data.take() {
                        old.stop().await;
                    }
                    // An early start's channels hear nothing back until the receiver has
                    // planned: they wait as long as this end waits for its `Want`.
                    let patient = machine.is_unconfirmed().then_some(Timeouts::default().reply);
                    let plan = channels.params(phase, sockets.take(), &peer_ports, patient);
                    match plan.map(|plan| plan.files_end(files.ends())) {
                        Ok(params) => {
                            // (UDP channels only: TCP streams have no first-contact wait.)
                            patient_data =
                                patient.is_some() && matches!(params, DataPlan::Channels(_));
                            // A task that is not patient keeps its own first-contact wait.
                            if !patient_data {
                                contact_by = None;
                            }
                            let store = data_store(&files, channels.fault, true, passes);
                            passes += 1;
                            let first = phase == machine.first_phase();
                            let recall = recall.take().filter(|_| first);
                            data_told |= first;
                            let (observer, planned) = (observer.clone(), planned.clone());
                            let heard = heard.clone();
                            data = Some((
                                phase,
                                DataTask::spawn(move |cancel| {
                                    let mut tell = |p: Progress| {
                                        if p.bytes > 0 {
                                            heard.store(true, Ordering::Relaxed);
                                        }
                                        if first
                                            && planned.load(Ordering::Acquire)
                                            && let Some(o) = lock(&observer).as_mut()
                                        {
                                            o.progress(p);
                                        }
                                    };
                                    params
                                        .send(&*store, &ranges, compress, recall, &mut tell, cancel)
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
        if patient_data && data.is_some() && !machine.is_unconfirmed() {
            patient_data = false;
            contact_by = Some(Instant::now() + idle);
        }
        tokio::select! {
            read = wire.messages.next(), if wire.open => {
                take_read(wire, &mut machine, read, &mut local);
            }
            () = sleep_until(contact_by) => {
                contact_by = None;
                if !heard.load(Ordering::Relaxed) && let Some((_, mut task)) = data.take() {
                    task.stop().await;
                    let packet_bytes = starting_datagram_bytes(channels.setup.base.packet_size);
                    let secs = idle.as_secs();
                    let err = channels.setup.data_error(DataError::NothingThrough { secs, packet_bytes });
                    fail(&mut machine, &mut local, hide, err);
                }
            }
            (phase, done) = data_end(&mut data) => {
                data = None;
                grace = None;
                match done.and_then(|r| r.map_err(|e| channels.setup.data_error(e))) {
                    Ok(report) if phase == machine.first_phase() => reports.0 = Some(report),
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
    let sent = outcome.map_err(|fault| wire.fault(fault, local, channels.peer()))?;
    if let Some(observer) = lock(&observer).as_mut().filter(|_| !sent.dry_run && !data_told) {
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
        early: started_early && machine.first_phase() == 0,
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
