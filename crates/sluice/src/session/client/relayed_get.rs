//! A relayed download's receiving end (`docs/relay.md`, "Downloads"): the client asks the
//! server to stripe a file or a tree over relays of the server's, plans where it lands, and
//! collects from the relays with the same collection a server runs for a relayed upload (in
//! this process, with a certificate of its own that the relays' capabilities bind), while the
//! server stripes and after it left.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use sluice_session::relay::{CollectMsg, RelayedGet, RelayedPut, StripeMsg, from_hex, id_ranges};
use tracing::info;

use super::{Client, SessionError};
use crate::session::channel::{REPLY_TIMEOUT, blocking, frame_error};
use crate::session::identity::Identity;
use crate::session::job_log::{Ended, unix_now};
use crate::session::keys::{ChannelRef, ChannelSecrets, DirectionSecret, SessionId};
use crate::session::messages::{Request, read_message};
use crate::session::relay::collect::{
    Collection, Collections, JobEvent, Listed, Policy, RelayAt, Start,
};
use crate::session::relay::landing::{
    Followed, Heard, Landing as LandedAt, accept, follow, land as land_at, relays_of,
};
use crate::session::relay::seal::{BlockKey, RELAY_KEY_LABEL};
use crate::session::relay::stripe::{Placed, RelayedOptions, RelayedReport};
use crate::tree::EntryKind;

/// What a relayed download asks of the server besides its options.
#[derive(Debug, Clone)]
pub struct RelayedDownload {
    /// What to fetch, relative to the server's root.
    pub path: String,
    /// A directory and everything beneath it.
    pub recursive: bool,
    /// The server's relays to stripe over, by the names its configuration gives them.
    pub relays: Vec<String>,
    /// Keep only relays whose round trip from the server is at most this many milliseconds.
    pub max_rtt_sender_ms: Option<u64>,
    /// Keep only relays whose round trip from here is at most this many milliseconds (each
    /// measured by a handshake that proves its fingerprint; one not reached is left out too).
    pub max_rtt_receiver_ms: Option<u64>,
    /// Where a download that is stopped, stalls (the server gone and blocks lost at a relay)
    /// or is cut off keeps its record, beside what it wrote, for the same download run again
    /// to move only what is missing (owner-only: a record holds the transfer's key). `None`:
    /// nothing is kept, and a stop deletes what it wrote.
    pub keep: Option<PathBuf>,
}

impl Client {
    /// Downloads `what` into `local` (a file's path, or a directory it lands in) through relays
    /// of this server's: the server stripes by `options` (its strategy, block size,
    /// compression and copies; the overwrite policy is this end's) and this process collects,
    /// verifies end to end and renames into place. Once `stop` is ready, the collection is
    /// stopped: what it wrote is kept for a re-run with `what.keep` (once the server said what
    /// the file is), else deleted. A re-run of a download `what.keep` kept (the same file or
    /// tree to the same place) moves only what is missing. The report's `send_seconds` is the
    /// server's part (until every block was safe on a relay), `total_seconds` the whole.
    pub async fn download_relayed(
        &self,
        what: &RelayedDownload,
        local: &Path,
        options: &RelayedOptions,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<RelayedReport, SessionError> {
        let started = Instant::now();
        // The certificate this end collects with: the server binds each relay's capability
        // to it, so that the capabilities are of no use to another peer.
        let identity = Arc::new(Identity::ephemeral()?);
        let get = RelayedGet {
            path: what.path.clone(),
            recursive: what.recursive,
            relays: what.relays.clone(),
            strategy: options.strategy,
            block_bytes: options.block_bytes,
            compress: options.compress,
            copies: options.copies,
            max_rtt_sender_ms: what.max_rtt_sender_ms,
            checksum: options.checksum,
            collector: identity.fingerprint().to_string(),
            direct: options.direct,
        };
        let mut req = self.request().await?;
        let welcomed = self.opened(req.write(&Request::RelayedGet(get)).await).await?;
        let at = ChannelRef { session_id: welcomed.session_id, request_id: req.id, channel: 0 };
        let secret =
            ChannelSecrets::derive_labelled(&self.conn, RELAY_KEY_LABEL, &at)?.server_to_client;
        let offer = read_message(&mut req.recv, REPLY_TIMEOUT * 4)
            .await
            .map_err(|e| frame_error(e, &self.conn))?;
        let put = match offer {
            StripeMsg::Offer(put) => *put,
            StripeMsg::Failed { code, message } => {
                return Err(SessionError::from_server(code, message));
            }
            other => return Err(SessionError::Protocol(format!("expected Offer, got {other:?}"))),
        };
        let super::relay::OpenRequestParts { mut send, mut recv } = req.into_parts();
        // Nothing is planned from an offer whose relays do not parse (or that names none).
        let none = || SessionError::Protocol("a relayed download over no relay".into());
        let relays =
            match relays_of(&put).and_then(|r| if r.is_empty() { Err(none()) } else { Ok(r) }) {
                Ok(relays) => relays,
                Err(e) => return Err(decline(&mut send, &self.conn, e).await),
            };
        let names: Vec<String> = put
            .relays
            .iter()
            .map(|r| r.name.clone().unwrap_or_else(|| r.address.clone()))
            .collect();
        // FSP's multi-constraint choice, this end's half: the server kept relays near it.
        let (skip, left_out) = match what.max_rtt_receiver_ms {
            Some(max) => far_relays(&relays, &names, max).await,
            None => (Vec::new(), Vec::new()),
        };
        if skip.len() == relays.len() {
            let e = SessionError::Refused(format!(
                "no relay is within --relay-max-rtt-receiver {} ms of here ({})",
                what.max_rtt_receiver_ms.unwrap_or_default(),
                left_out.join("; ")
            ));
            return Err(decline(&mut send, &self.conn, e).await);
        }
        let landing = match land(&put, relays, local, options, what, identity, &secret).await {
            Ok(landing) => landing,
            Err(e) => return Err(decline(&mut send, &self.conn, e).await),
        };
        let mut placed: Vec<Placed> =
            names.iter().map(|name| Placed { name: name.clone(), ..Placed::default() }).collect();
        if options.direct {
            placed.push(Placed { name: "direct".into(), ..Placed::default() });
        }
        let (job, mut events, files, kept_files, collections, resumed, _kept) = match landing {
            Landing::Kept => {
                let kept = CollectMsg::Accepted {
                    job: String::new(),
                    have: Vec::new(),
                    wanted: Some(Vec::new()),
                    skip: Vec::new(),
                };
                accept(&mut send, &self.conn, &kept).await?;
                let _ = send.finish();
                let secs = started.elapsed().as_secs_f64();
                return Ok(RelayedReport {
                    send_seconds: secs,
                    total_seconds: Some(secs),
                    kept_files: 1,
                    placed,
                    left_out,
                    ..RelayedReport::default()
                });
            }
            Landing::Collecting {
                job,
                mut events,
                wanted,
                files,
                kept_files,
                collections,
                kept,
            } => {
                let resumed = job.have().len() as u64;
                if resumed > 0 {
                    info!(blocks = resumed, "an earlier run of this download wrote these blocks");
                }
                let have = id_ranges(job.have());
                let accepted = CollectMsg::Accepted { job: job.name(), have, wanted, skip };
                if let Err(e) = accept(&mut send, &self.conn, &accepted).await {
                    job.cancel();
                    let _ = ended(&mut events).await;
                    return Err(e);
                }
                (job, events, files, kept_files, collections, resumed, kept)
            }
        };
        // This end in the striping: lines that take the server's direct share until the
        // collection ends (they end with it) or the server's striping does.
        let mut taking = tokio::task::JoinSet::new();
        if options.direct {
            for _ in 0..TAKE_LINES {
                let (server, job) = (self.clone(), job.clone());
                taking.spawn(take_line(server, put.transfer.clone(), job));
            }
        }
        let mut sent_at = None;
        let plan = job.plan();
        let mut heard = |heard: Heard<'_>| match heard {
            Heard::Placed(relay, blocks) => {
                if let Some(p) = placed.get_mut(relay as usize) {
                    p.blocks += blocks.len() as u64;
                    let len = |id: &u64| plan.range(*id).map_or(0, |r| r.end - r.start);
                    p.bytes += blocks.iter().map(len).sum::<u64>();
                }
            }
            Heard::Sent => sent_at = Some(started.elapsed().as_secs_f64()),
        };
        let collecting = async {
            let followed = follow(&mut send, &mut recv, &job, &mut events, &mut heard).await;
            match followed {
                Ok(Followed::Done) => Ok(()),
                Ok(Followed::Left { sent }) => {
                    // The server retreated (or gave up): the collection goes on with what it
                    // placed.
                    job.sender_left(sent);
                    let _ = send.finish();
                    info!(sent, "the server's part is done: collecting on");
                    ended(&mut events).await
                }
                Ok(Followed::Failed(e)) => Err(e),
                Err(e) => Err(e),
            }
        };
        let end = tokio::select! {
            end = collecting => end,
            () = stop => Err(SessionError::Refused(match what.keep {
                Some(_) => "the download was stopped: the same command run again goes on from \
                            what arrived"
                    .into(),
                None => "the download was stopped".into(),
            })),
        };
        taking.shutdown().await;
        if options.direct {
            // Counted by the job as they were written: a line ended just now may not have
            // seen its last batch through.
            if let Some(direct) = placed.last_mut() {
                (direct.blocks, direct.bytes) = job.own_delivered();
            }
        }
        let send_seconds = sent_at.unwrap_or_else(|| started.elapsed().as_secs_f64());
        if end.is_err() && collections.runs(&job) {
            // Stopped, or the server broke the protocol: the job ends, what it wrote kept for
            // a re-run when there is a place for its record, else deleted.
            match what.keep {
                Some(_) => job.pause(),
                None => job.cancel(),
            }
            let end = ended(&mut events).await;
            if let Err(e) = &end {
                info!(error = %e, "the collection ended");
            }
        }
        if let Err(e) = end {
            // Without a place for records nothing is kept (a stalled job's files too): no
            // re-run could go on from them.
            if what.keep.is_none() {
                blocking(move || {
                    collections.drop_stalled();
                    Ok(())
                })
                .await?;
            }
            return Err(e);
        }
        Ok(RelayedReport {
            files,
            bytes: plan.size,
            blocks: plan.count(),
            send_seconds,
            total_seconds: Some(started.elapsed().as_secs_f64()),
            job: String::new(),
            resumed_blocks: resumed,
            kept_files,
            placed,
            left_out,
        })
    }
}

/// Take requests under way at once: the next one's request and `Ready` exchange overlap the
/// data of the one before (the server's direct worker keeps two deposits going, and its link
/// lets one move at a time).
const TAKE_LINES: usize = 2;

/// Takes batches of the server's direct share into `job` (which counts them), until the server
/// says there is no such share any more or a take fails.
async fn take_line(server: Client, transfer: String, job: Arc<Collection>) {
    loop {
        match server.take_direct(&transfer, &job).await {
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(error = %e, "the direct share ends");
                return;
            }
        }
    }
}

/// The offer's relays (by number) farther from here than `max` ms, or not reached by a
/// handshake that proves their fingerprints, each measured at once; and why, by name.
async fn far_relays(relays: &[RelayAt], names: &[String], max: u64) -> (Vec<u32>, Vec<String>) {
    let peers: Vec<_> = relays.iter().map(|r| (r.address, r.fingerprint.clone())).collect();
    let rtts = super::relay::handshake_rtts(&peers).await;
    let mut far = Vec::new();
    for (i, (rtt, name)) in rtts.into_iter().zip(names).enumerate() {
        let why = match rtt {
            Some(rtt) if rtt <= std::time::Duration::from_millis(max) => continue,
            Some(rtt) => format!(
                "relay {name} left out: its round trip from here is {:.1} ms \
                 (--relay-max-rtt-receiver {max})",
                rtt.as_secs_f64() * 1000.0
            ),
            None => format!("relay {name} left out: no handshake with its fingerprint from here"),
        };
        far.push((i as u32, why));
    }
    far.into_iter().unzip()
}

/// Tells the server why this end declines its offer, and ends the request; `e` again.
async fn decline(
    send: &mut quinn::SendStream,
    conn: &quinn::Connection,
    e: SessionError,
) -> SessionError {
    let msg = CollectMsg::Failed { code: e.code(), message: e.detail() };
    let _ = accept(send, conn, &msg).await;
    let _ = send.finish();
    e
}

/// Waits for the collection's end (its events channel closed when it ended before).
async fn ended(
    events: &mut tokio::sync::mpsc::UnboundedReceiver<JobEvent>,
) -> Result<(), SessionError> {
    loop {
        match events.recv().await {
            Some(JobEvent::End(end)) => return end.map(drop),
            Some(JobEvent::Refetch(_)) => {}
            None => return Err(SessionError::Network("the collection ended".into())),
        }
    }
}

/// Where a relayed download lands: nothing (the file is kept as it is), or a collection.
enum Landing {
    Kept,
    Collecting {
        job: Arc<Collection>,
        events: tokio::sync::mpsc::UnboundedReceiver<JobEvent>,
        wanted: Option<Vec<u32>>,
        files: u64,
        kept_files: u64,
        /// The collection's home in this process (it holds its task).
        collections: Arc<Collections>,
        /// What earlier runs kept, left as it is when this one ends.
        kept: Option<LeaveKept>,
    },
}

/// Leaves what the collections kept for re-runs on disk when dropped (a stalled tree's
/// temporary files are otherwise deleted with it): the downloads an earlier process kept,
/// loaded by this one, are not this one's to delete.
struct LeaveKept(Arc<Collections>);

impl Drop for LeaveKept {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Plans where `put` lands at `local` with this end's overwrite policy and starts its
/// collection (a tree's temporary files or the file's part file made), from what an earlier
/// run of the same download kept in `what.keep`.
async fn land(
    put: &RelayedPut,
    relays: Vec<RelayAt>,
    local: &Path,
    options: &RelayedOptions,
    what: &RelayedDownload,
    identity: Arc<Identity>,
    secret: &DirectionSecret,
) -> Result<Landing, SessionError> {
    let transfer = from_hex::<16>(&put.transfer)
        .ok_or_else(|| SessionError::Protocol(format!("bad transfer id {:?}", put.transfer)))?;
    // The destination's directory is the root nothing leaves: a file lands at `local` (or
    // beneath it, when it is a directory), a tree beneath `local`.
    let at: PathBuf = std::path::absolute(local)
        .map_err(|e| SessionError::io(format!("reading {}", local.display()), e))?;
    let root = if at.is_dir() { at.clone() } else { crate::files::parent_dir(&at).to_owned() };
    if !put.entries.is_empty() && !at.is_dir() {
        return Err(SessionError::Config(format!(
            "{}: a tree lands in a directory that exists",
            local.display()
        )));
    }
    let policy = Policy {
        overwrite: options.overwrite,
        preserve: options.preserve,
        checksum: options.checksum,
    };
    // What earlier runs kept (records are written owner-only), each stalled for its re-run.
    let keep = what.keep.clone();
    let collections = Arc::new(Collections::new(Ended::default(), keep.clone()));
    // Whatever happens next, what other runs kept stays.
    let kept = keep.is_some().then(|| LeaveKept(collections.clone()));
    let (offer, within, found, by) =
        (put.clone(), root.clone(), collections.clone(), identity.clone());
    let landed = blocking(move || {
        if keep.is_some() {
            found.resume_kept_downloads(&by, &within);
        }
        land_at(&found, &within, &at, &offer, policy)
    })
    .await?;
    let LandedAt { planned, tree, manifest, resume } = landed;
    if planned.keeps_the_file() {
        return Ok(Landing::Kept);
    }
    let all = put.entries.iter().filter(|e| e.kind == EntryKind::File).count().max(1) as u64;
    let files = planned.wanted.as_ref().map_or(all, |w| w.len() as u64);
    let start = Start {
        transfer,
        session: SessionId::random()?,
        key: BlockKey::new(secret, transfer),
        plan: planned.plan,
        dest: planned.dest.clone(),
        fs: planned.fs,
        relays,
        identity,
        permits: Box::new(()),
        resume,
        tree,
        policy,
        mode: put.mode.unwrap_or(0o644),
        mtime: put.mtime,
        manifest,
        root,
        token_digest: [0; 32],
        restored: None,
        listed: Listed {
            token: 0,
            dest: planned.dest.display().to_string(),
            files,
            started: unix_now(),
        },
    };
    let found = collections.clone();
    let (job, events) = blocking(move || Collection::start(start, &found)).await?;
    Ok(Landing::Collecting {
        job,
        events,
        wanted: planned.wanted,
        files,
        kept_files: all.saturating_sub(files),
        collections,
        kept,
    })
}
